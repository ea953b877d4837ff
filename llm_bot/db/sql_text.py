"""A statement with named placeholders as Postgres takes it: with ``$n`` placeholders, and the
parameters' names in that order.

psycopg turns ``%(name)s`` into ``$n`` by parsing the statement's text on each execution, and
keeps the result only for a text of at most 4,096 characters
(``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``). Recall's statement is longer, documented
inline, and runs for every event: parsed anew each time, it cost about a third of its
execution's CPU. Converted once here, it is sent through a raw cursor, which parses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

_OPEN, _CLOSE = "%(", ")s"


@cache
def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with each ``%(name)s`` made ``$n`` (a name used twice is one parameter), and the
    names by ``n``. Raises ``ValueError`` on any other ``%``: our statements use none."""
    names: dict[str, int] = {}
    parts: list[str] = []
    start = 0
    while (at := sql.find("%", start)) >= 0:
        end = sql.find(_CLOSE, at) if sql.startswith(_OPEN, at) else -1
        if end < 0:
            raise ValueError(f"a % that is no %(name)s placeholder at {at}")
        name = sql[at + len(_OPEN) : end]
        number = names.setdefault(name, len(names) + 1)
        parts += [sql[start:at], f"${number}"]
        start = end + len(_CLOSE)
    parts.append(sql[start:])
    return "".join(parts), tuple(names)


def values(names: Sequence[str], parameters: Mapping[str, Any]) -> list[Any]:
    """The parameters in the order :func:`positional` numbered them."""
    return [parameters[name] for name in names]
