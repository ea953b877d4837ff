"""Rows of one table that lack a vector in a slot, read page by page and given their vectors:
the re-embedding's fill (:mod:`llm_bot.lifecycle.vector_slots`) runs these over the
statements each table's owner writes for them.

Where vectors live: the live column (``embedding``) or the one a re-embedding builds
(``embedding_next``), in each table that holds vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from psycopg import AsyncConnection, sql

from llm_bot.db.vectors import vector_param

Slot = Literal["embedding", "embedding_next"]
LIVE: Slot = "embedding"
SHADOW: Slot = "embedding_next"


@dataclass(frozen=True)
class MissingVectors:
    """Rows of one kind needing a vector in a slot, read page by page in key order (``start``
    is before the first key; a row's key is its first ``len(start)`` columns, its text the
    last); ``write`` takes the vector, then the row's first three columns."""

    name: str
    start: tuple[Any, ...]
    count_query: sql.Composed
    page_query: sql.Composed
    write: sql.Composed

    @classmethod
    def of(
        cls, name: str, start: tuple[Any, ...], statements: tuple[str, str, str], slot: Slot
    ) -> MissingVectors:
        """From the table owner's statements (count, page, write), ``{c}`` the slot's column."""
        count_query, page_query, write = (
            sql.SQL(statement).format(c=sql.Identifier(slot)) for statement in statements
        )
        return cls(name, start, count_query, page_query, write)

    async def count(self, connection: AsyncConnection[Any]) -> int:
        cursor = await connection.execute(self.count_query)
        row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def page(
        self, connection: AsyncConnection[Any], after: tuple[Any, ...], limit: int
    ) -> list[tuple[Any, ...]]:
        cursor = await connection.execute(self.page_query, (*after, limit))
        return list(await cursor.fetchall())

    async def write_vectors(
        self, connection: AsyncConnection[Any], kept: list[tuple[tuple[Any, ...], list[float]]]
    ) -> None:
        params = [(vector_param(vector), *row[:3]) for row, vector in kept]
        async with connection.cursor() as cursor:
            await cursor.executemany(self.write, params)
