"""``DATABASE_URL`` checked before anything connects with it, its flaw named without its text.

libpq's own errors quote the URL's parts, and a flaw inside the password (a space, a bare
``%``, an unencoded ``@`` or ``/`` that moves part of it into the host or port) is the likeliest
flaw of all: an error that quoted it would put the password in the logs. So the settings check
the URL here first and refuse it with a pydantic error naming the part that holds the flaw.
"""

from __future__ import annotations

import re
from typing import NoReturn

from pydantic_core import PydanticCustomError

_SCHEMES = ("postgresql", "postgres")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,19}")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_BAD_CHARACTER = re.compile(r"[\x00-\x20\x7f]")
_UNKNOWN_PARAMETER = re.compile(
    r'(?:invalid URI query parameter: |invalid connection option )"(\w{1,40})"'
)


def check_database_url(url: str) -> None:
    """Raise a pydantic error naming what is wrong with ``DATABASE_URL`` and which part of it
    holds the flaw, never any of its text: the password is in it, and a flaw inside the
    password (a space, a bare ``%``, an unencoded ``@`` or ``/`` that moves part of it into
    the host or port, which connection errors quote) is the likeliest flaw of all."""
    scheme, separator, rest = url.partition("://")
    if separator:
        if scheme.lower() not in _SCHEMES:
            shown = f" (got {scheme}://)" if _SCHEME.fullmatch(scheme) else ""
            _refuse(f"the scheme must be postgresql:// or postgres://{shown}")
        for part, text in _uri_parts(rest).items():
            _check_part(part, text)
    from psycopg import ProgrammingError  # only where a URL is set: `llm-bot schema` needs none
    from psycopg.conninfo import conninfo_to_dict

    try:
        parameters = conninfo_to_dict(url)
    except ProgrammingError as error:
        unknown = _UNKNOWN_PARAMETER.search(str(error))
        _refuse(
            f"unknown connection parameter {unknown.group(1)!r}"
            if unknown
            else "not a postgresql:// URL or key=value connection string that libpq accepts"
        )
    for port in str(parameters.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            _refuse("a port is not a number from 1 to 65535")


def _uri_parts(rest: str) -> dict[str, str]:
    """The text after ``scheme://`` cut where libpq cuts it: the credentials end at the first
    ``@`` (when no ``/`` comes first), the hosts at ``/`` or ``?``, the database at ``?``."""
    parts: dict[str, str] = {}
    cut = min((rest.find(c) for c in "@/" if c in rest), default=len(rest))
    if rest[cut : cut + 1] == "@":
        user, _, password = rest[:cut].partition(":")
        parts |= {"user name": user, "password": password}
        rest = rest[cut + 1 :]
    cut = min((rest.find(c) for c in "/?" if c in rest), default=len(rest))
    parts["host"], rest = rest[:cut], rest[cut:]
    path, _, parts["parameters after ?"] = rest.partition("?")
    parts["database name"] = path.removeprefix("/")
    return parts


def _check_part(part: str, text: str) -> None:
    if _BAD_CHARACTER.search(text):
        _refuse(f"the {part} holds a space or control character: percent-encode it (%20)")
    if _BAD_PERCENT.search(text):
        _refuse(f"the {part} holds a % without two hex digits after it: write % as %25")
    if "%00" in text:
        _refuse(f"the {part} holds %00, which libpq refuses")
    if part in ("host", "database name") and "@" in text:
        _refuse(
            f"the {part} holds '@': a password's '@' and '/' must be percent-encoded (%40, %2F)"
        )


def _refuse(problem: str) -> NoReturn:
    raise PydanticCustomError("database_url", "{problem}", {"problem": problem})
