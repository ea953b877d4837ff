"""What the measuring commands (``bench``, ``eval``) share: where their database comes from and
how they report progress."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from llm_bot.settings import Settings


@contextlib.contextmanager
def database_for_measurements(settings: Settings) -> Iterator[str]:
    """``DATABASE_URL``, or an embedded Postgres under ``.llm-bot/`` when it is unset."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
        return
    from llm_bot_tools.cli.dev import local_postgres_or_refuse
    from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres

    local_postgres_or_refuse()
    with EmbeddedPostgres(Path(".llm-bot/postgres")) as postgres:
        yield postgres.url


def progress(line: str) -> None:
    """A line on stderr, so stdout holds only the result (``--json`` output stays parseable)."""
    print(f"# {line}", file=sys.stderr, flush=True)
