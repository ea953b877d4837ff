"""Where vectors live (the live column, or the one a re-embedding builds, in each of
:data:`TABLES`) and one pass that gives every row of history and every memory the vector it
lacks in a slot.

A row needs a vector when its slot is empty: a turn never changes, and rewriting a memory
empties its re-embedding slot (and its live one, when the writer had no vector). A memory's
vector is written only if the memory still has the text that was embedded, so a rewrite racing
the pass is picked up by the next one instead of being given a vector of its old text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from psycopg import AsyncConnection, sql

from llm_bot.db.vectors import vector_param
from llm_bot.llm.embeddings import Embedder, EmbeddingInputRejected
from llm_bot.memory import memories
from llm_bot.memory.turns.upkeep import MISSING_VECTORS

PROGRESS_EVERY_S = 2.0

# The tables holding vectors, each in both slots' columns.
TABLES = ("conversation_turns", "memories")

Slot = Literal["embedding", "embedding_next"]
LIVE: Slot = "embedding"
SHADOW: Slot = "embedding_next"


async def fill_pass(
    connection: AsyncConnection[Any],
    embedder: Embedder,
    slot: Slot,
    batch: int,
    progress: Callable[[str], None],
) -> tuple[int, int]:
    """Vectors made, and texts the endpoint refused (left without one, found by their words)."""
    made = refused = 0
    history = _Rows.of("history", ("", "", -1), MISSING_VECTORS, slot)
    stored = _Rows.of("memories", ("", ""), memories.MISSING_VECTORS, slot)
    for rows in (history, stored):
        total = await rows.count(connection)
        done, last_report = 0, time.monotonic()
        after: tuple[Any, ...] = rows.start
        while page := await rows.page(connection, after, batch):
            vectors = await _embed(embedder, [row[-1] for row in page])
            kept = [(row, v) for row, v in zip(page, vectors, strict=True) if v is not None]
            await rows.write_vectors(connection, kept)
            made += len(kept)
            refused += len(page) - len(kept)
            done += len(page)
            after = page[-1][: len(rows.start)]
            if time.monotonic() - last_report >= PROGRESS_EVERY_S or done >= total:
                progress(f"{rows.name}: {done}/{total}")
                last_report = time.monotonic()
    return made, refused


async def _embed(embedder: Embedder, texts: Sequence[str]) -> list[list[float] | None]:
    """One request; when the endpoint refuses an input, each text alone, so only the refused
    ones go without a vector. Any other failure stops the run (it resumes where it stopped)."""
    try:
        return list(await embedder.embed(texts))
    except EmbeddingInputRejected:
        vectors: list[list[float] | None] = []
        for text in texts:
            try:
                vectors.append((await embedder.embed([text]))[0])
            except EmbeddingInputRejected:
                vectors.append(None)
        return vectors


@dataclass(frozen=True)
class _Rows:
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
        cls, name: str, start: tuple[Any, ...], statements: tuple[str, ...], slot: Slot
    ) -> _Rows:
        """From the table owner's statements, with ``{c}`` the slot's column."""
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
