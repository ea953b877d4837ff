"""Move every stored vector, memories and history together, to a new embedding model while the
workers keep running.

Vectors of two models cannot be mixed (:mod:`llm_bot.db.embedding_space`), so the new ones are
built beside the live ones — the ``embedding_next`` columns of ``conversation_turns`` and
``memories`` — while workers go on writing and searching the live ones. Passes embed what is
missing (a memory rewritten since its new vector was made has none again) until little is
left; then one short transaction waits for the writers to finish, embeds the last few rows,
swaps the new vectors in (a rename of columns: no table is rewritten) and records the new
model. From then on, workers still on the old model write without vectors and the next ones
start on the new model. Recall's index over history vectors (:mod:`llm_bot.db.turn_index`) is
built on the new column before the switch and moves with it.

Resumable: the target model is recorded, and a run interrupted at any point starts again where
the previous one stopped (the rows that still need a vector). Run with the model already live,
it fills what has no vector yet (writes made while embeddings failed, or by workers of the
previous model after a switch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from llm_bot.clock import utc_now
from llm_bot.db.embedding_space import (
    EmbeddingModelMismatch,
    EmbeddingSpace,
    lock_for_switch,
    read_space,
    record_switch,
    record_target,
)
from llm_bot.db.missing_vectors import LIVE, SHADOW, Slot
from llm_bot.db.turn_index import ensure_index, promote_shadow_index
from llm_bot.db.vectors import register_vectors
from llm_bot.lifecycle.vector_slots import TABLES, fill_pass
from llm_bot.llm.embeddings import Embedder

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]

# The columns' changes, of each table that holds vectors: one command per statement (Citus
# refuses several in one string: docs/citus.md, "Statements Citus sends whole").
_MAKE_ROOM = (
    "ALTER TABLE {t} DROP COLUMN IF EXISTS embedding_next",
    "ALTER TABLE {t} ADD COLUMN embedding_next vector",
)
_SWAP = (
    "ALTER TABLE {t} DROP COLUMN embedding",
    "ALTER TABLE {t} RENAME COLUMN embedding_next TO embedding",
    "ALTER TABLE {t} ADD COLUMN embedding_next vector",
)

# A pass that finds no more than this many rows to embed leaves the rest to the switch, which
# embeds while the writers wait (or, with the model already live, to the next run).
SWITCH_WHEN_AT_MOST = 200


@dataclass
class ReembedReport:
    model: str
    dimensions: int
    previous_model: str
    vectors: int = 0  # made by this run, history and memories together
    unembeddable: int = 0  # refused by the endpoint: left without a vector, found by words
    switched: bool = False


async def reembed(
    connection: AsyncConnection[Any], embedder: Embedder, *, batch: int, progress: Progress
) -> ReembedReport:
    """Bring every stored vector to ``embedder``'s model; ``connection`` is in autocommit."""
    register_vectors(connection)
    dimensions = await embedder.dimensions()
    space = await read_space(connection)
    if space is None:
        raise EmbeddingModelMismatch("no embedding model is recorded: run `llm-bot migrate`")
    report = ReembedReport(embedder.model, dimensions, previous_model=space.model)
    if space.made_by(embedder.model, dimensions):
        progress(f"vectors are {space.model}'s already: filling what has none")
        await _fill_until(
            connection, embedder, LIVE, batch, progress, report, at_most=SWITCH_WHEN_AT_MOST
        )
        await _index(connection, dimensions, LIVE, progress)
        return report
    await _begin(connection, space, embedder.model, dimensions, progress)
    await _fill_until(
        connection, embedder, SHADOW, batch, progress, report, at_most=SWITCH_WHEN_AT_MOST
    )
    await _index(connection, dimensions, SHADOW, progress)
    await _switch(connection, embedder, batch, progress, report)
    return report


async def _index(
    connection: AsyncConnection[Any], dimensions: int, slot: Slot, progress: Progress
) -> None:
    """The recall index over ``slot`` (:mod:`llm_bot.db.turn_index`), built concurrently while
    the workers write, once that slot holds (nearly) every vector: one build over the rows is
    far cheaper than an insertion per row written by the passes."""
    started = time.monotonic()
    if await ensure_index(connection, dimensions, slot):
        progress(f"built the history index of {slot} in {time.monotonic() - started:.1f} s")


async def _begin(
    connection: AsyncConnection[Any],
    space: EmbeddingSpace,
    model: str,
    dimensions: int,
    progress: Progress,
) -> None:
    """Record the target and make room for its vectors; a run towards the same target that
    was interrupted keeps what it built."""
    if (space.next_model, space.next_dimensions) == (model, dimensions):
        progress(f"resuming the move from {space.model} to {model}")
        return
    progress(f"moving vectors from {space.model} ({space.dimensions}) to {model} ({dimensions})")
    async with connection.transaction():
        await lock_for_switch(connection)
        await _alter(connection, _MAKE_ROOM)
        await record_target(connection, model, dimensions)


async def _fill_until(
    connection: AsyncConnection[Any],
    embedder: Embedder,
    slot: Slot,
    batch: int,
    progress: Progress,
    report: ReembedReport,
    *,
    at_most: int,
) -> None:
    """Passes over history and memories until one finds no more than ``at_most`` rows to
    embed (workers keep adding rows while a pass runs)."""
    while True:
        started = time.monotonic()
        made, refused = await fill_pass(connection, embedder, slot, batch, progress)
        report.vectors += made
        report.unembeddable = refused
        elapsed = time.monotonic() - started
        progress(f"pass: {made} vector(s) in {elapsed:.1f} s, {refused} refused by the endpoint")
        if made <= at_most:
            return


async def _switch(
    connection: AsyncConnection[Any],
    embedder: Embedder,
    batch: int,
    progress: Progress,
    report: ReembedReport,
) -> None:
    progress("switching: waiting for in-flight writes")
    async with connection.transaction():
        await lock_for_switch(connection)
        await _fill_until(connection, embedder, SHADOW, batch, progress, report, at_most=0)
        await _alter(connection, _SWAP)
        await promote_shadow_index(connection, report.dimensions)
        await record_switch(connection, utc_now())
    report.switched = True
    progress(f"switched: every vector is {report.model}'s ({report.dimensions} dimensions)")


async def _alter(connection: AsyncConnection[Any], statements: tuple[str, ...]) -> None:
    for table in TABLES:
        for statement in statements:
            await connection.execute(sql.SQL(statement).format(t=sql.Identifier(table)))
