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
from llm_bot.memory import memories, turns

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
    for rows in (_turn_rows(slot), _memory_rows(slot)):
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
    last); ``write_params`` binds a row and its vector to ``write``."""

    name: str
    start: tuple[Any, ...]
    count_query: sql.Composed
    page_query: sql.Composed
    write: sql.Composed
    write_params: Callable[[tuple[Any, ...], list[float]], tuple[Any, ...]]

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
        async with connection.cursor() as cursor:
            await cursor.executemany(self.write, [self.write_params(row, v) for row, v in kept])


def _turn_rows(slot: Slot) -> _Rows:
    count_query, page_query, write = turns.missing_vectors(slot)
    return _Rows(
        name="history",
        start=("", "", -1),
        count_query=count_query,
        page_query=page_query,
        write=write,
        write_params=lambda row, vector: (vector_param(vector), row[0], row[1], row[2]),
    )


def _memory_rows(slot: Slot) -> _Rows:
    count_query, page_query, write = memories.missing_vectors(slot)
    return _Rows(
        name="memories",
        start=("", ""),
        count_query=count_query,
        page_query=page_query,
        write=write,
        write_params=lambda row, vector: (vector_param(vector), row[0], row[1], row[2]),
    )
