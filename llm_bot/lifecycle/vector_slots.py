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
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.missing_vectors import Slot
from llm_bot.llm.embeddings import Embedder, EmbeddingInputRejected
from llm_bot.memory import memories
from llm_bot.memory.turns import upkeep as turn_upkeep

PROGRESS_EVERY_S = 2.0

# The tables holding vectors, each in both slots' columns.
TABLES = ("conversation_turns", "memories")


async def fill_pass(
    connection: AsyncConnection[Any],
    embedder: Embedder,
    slot: Slot,
    batch: int,
    progress: Callable[[str], None],
) -> tuple[int, int]:
    """Vectors made, and texts the endpoint refused (left without one, found by their words)."""
    made = refused = 0
    history = turn_upkeep.missing_vectors(slot)
    stored = memories.missing_vectors(slot)
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
