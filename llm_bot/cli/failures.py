"""How a failed command ends: one line on stderr that says what went wrong, without a
traceback and without a secret.

Operators run these commands where stderr is kept (Cloud Logging for the worker and the
migrate job), so the line must never carry the API key or the database password, even when
a library's error quotes them. ``LOG_LEVEL=DEBUG`` adds the traceback, masked the same way.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterable

from llm_bot.settings import Settings

EXIT_FAILED = 1
MASK = "[REDACTED]"
# Shorter secrets would mask ordinary words of a message; the whole URL and key still go.
MIN_MASKED_CHARS = 3


def secrets_of(settings: Settings) -> list[str]:
    """Every form in which a secret of ``settings`` may appear in an error or a log line: the
    API key, the database URL, and its password as written (percent-encoded) and decoded; the
    tool-gateway's token, and its URL with any query (the gateway accepts ``?token=``)."""
    keys = (settings.openai_api_key, settings.database_url, settings.mcp_auth_token)
    found = [s.get_secret_value() for s in keys if s]
    if settings.database_url is not None:
        found += _passwords(settings.database_url.get_secret_value())
    if settings.mcp_gateway_url:
        url = settings.mcp_gateway_url.strip()
        found += [url, url.partition("?")[2]]
    return sorted({s for s in found if len(s) >= MIN_MASKED_CHARS}, key=len, reverse=True)


def _passwords(url: str) -> list[str]:
    import psycopg  # here, not at the top: a command that does not fail does not need it
    from psycopg.conninfo import conninfo_to_dict

    written = url.partition("://")[2].partition("@")[0].partition(":")[2] if "@" in url else ""
    try:
        decoded = str(conninfo_to_dict(url).get("password") or "")
    except psycopg.Error:  # settings refuse such a URL; masking must not fail on one anyway
        decoded = ""
    return [written, decoded]


def masked(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def report_failure(error: Exception, settings: Settings) -> int:
    """Print ``error`` as one masked line (and its traceback at ``LOG_LEVEL=DEBUG``); the exit
    code of a command that failed."""
    secrets = secrets_of(settings)
    if settings.log_level == "DEBUG":
        print(masked("".join(traceback.format_exception(error)), secrets), file=sys.stderr)
    print(f"llm-bot: {masked(describe(error), secrets)}", file=sys.stderr)
    return EXIT_FAILED


def describe(error: Exception) -> str:
    """The first line of the error's message, and what kind of failure it is."""
    import psycopg
    from psycopg_pool import PoolTimeout

    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    if isinstance(error, psycopg.OperationalError | PoolTimeout):
        return f"database unreachable: {first}"
    return f"{type(error).__name__}: {first}" if lines else first
