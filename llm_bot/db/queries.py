"""An owner's query, read in a statement of its own or beside other owners' queries in one.

Context assembly reads the notes, the thread's window and a count of the user's memories in one
round trip, and each is another table's owner's (tests/unit/test_table_owners.py). Each owner
hands out a :class:`Query`: its SQL, its parameters and how its rows read as what it returns,
so the columns stay the owner's. :func:`read_together` sends them as one statement that puts
the queries' rows side by side (``FULL JOIN ... ON false``: a row is one query's, the others'
columns null) and gives each query its own rows back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Generic, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

T = TypeVar("T")
Row = tuple[Any, ...]


@dataclass(frozen=True, eq=False)
class Query(Generic[T]):
    """``sql`` with named parameters, their values ``params``; it selects ``width`` columns,
    the first never null (what tells its rows in a read of several), and ``result`` reads its
    rows."""

    sql: str
    params: Mapping[str, Any]
    width: int
    result: Callable[[list[Row]], T]


async def read(connection: AsyncConnection[Any], query: Query[T]) -> T:
    """``query`` in a statement of its own."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(query.sql, query.params)
        return query.result(await cursor.fetchall())


@dataclass(frozen=True)
class Together:
    """The rows of a statement of several queries, each query's apart."""

    rows: Mapping[Query[Any], list[Row]]

    def of(self, query: Query[T]) -> T:
        return query.result(self.rows[query])


async def read_together(connection: AsyncConnection[Any], *queries: Query[Any]) -> Together:
    """``queries`` in one statement, in their order; a parameter two of them name must have
    one value."""
    params: dict[str, Any] = {}
    for query in queries:
        for name, value in query.params.items():
            if params.setdefault(name, value) != value:
                raise ValueError(f"the queries give the parameter {name!r} two values")
    sides = " FULL JOIN ".join(
        f"({query.sql}) AS q{n}{' ON false' if n else ''}" for n, query in enumerate(queries)
    )
    firsts = accumulate((query.width for query in queries[:-1]), initial=0)
    placed = list(zip(queries, firsts, strict=True))
    rows: dict[Query[Any], list[Row]] = {query: [] for query in queries}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        statement = f"SELECT * FROM {sides}"  # noqa: S608 (the owners' constants only)
        await cursor.execute(statement, params)
        for row in await cursor.fetchall():
            for query, first in placed:
                if row[first] is not None:
                    rows[query].append(row[first : first + query.width])
                    break
    return Together(rows)
