"""Which embedding model made the stored vectors, so no process mixes two models' vectors.

A vector is only comparable with vectors of the same model: a query embedded by one model
against memories or history embedded by another fails (different sizes) or, worse, returns
nonsense (same size). The ``embedding_space`` row names the model of every live vector, for
memories and history alike. Start-up refuses a model that is not that one, with the command
that moves the vectors (:func:`llm_bot.memory.store.settle_space`).

``llm-bot reembed`` changes the row while workers run. Each write transaction that stores
vectors holds a shared advisory lock and reads the row (:data:`SPACE_FOR_WRITE`); the switch
takes the lock exclusively (:func:`lock_for_switch`), so a transaction writes either before the
switch with the old model's vectors, or after it knowing the model changed — never old vectors
into the new space. The switch alters ``memories`` and ``conversation_turns`` while it holds
the lock, so a transaction takes the lock before it touches either (else each would wait for
the other).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row

SPACE_LOCK_ID = 0x11B07_0002


class EmbeddingModelMismatch(RuntimeError):
    """The configured embedding model is not the one that made the stored vectors."""


@dataclass(frozen=True)
class EmbeddingSpace:
    model: str
    dimensions: int
    next_model: str | None = None  # the target of a re-embedding under way
    next_dimensions: int | None = None

    def made_by(self, model: str, dimensions: int) -> bool:
        return self.model == model and self.dimensions == dimensions


async def read_space(connection: AsyncConnection[Any]) -> EmbeddingSpace | None:
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT model, dimensions, next_model, next_dimensions FROM embedding_space"
        )
        row = await cursor.fetchone()
    return None if row is None else EmbeddingSpace(**row)


async def record_space(connection: AsyncConnection[Any], model: str, dimensions: int) -> None:
    """Name the stored vectors' model, unless one is named (the first start of a database)."""
    await connection.execute(
        "INSERT INTO embedding_space (model, dimensions) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (model, dimensions),
    )


# The live space under the shared lock that :func:`lock_for_switch` excludes, read with a
# snapshot taken after the lock was granted (migration 0016), so it cannot change before the
# transaction ends. A query of its own, or the first step of the statement that stores an
# event's output (migration 0019's store_event_output: one statement for both).
SPACE_FOR_WRITE = f"SELECT * FROM embedding_space_for_write({SPACE_LOCK_ID})"  # noqa: S608


def space_of(row: tuple[Any, ...] | None) -> EmbeddingSpace:
    """The space from :data:`SPACE_FOR_WRITE`'s columns (model, dimensions, next model, next
    dimensions), which are null when no model is recorded."""
    if row is None or row[0] is None:
        raise EmbeddingModelMismatch("no embedding model is recorded: run `llm-bot migrate`")
    return EmbeddingSpace(*row)


async def space_for_write(connection: AsyncConnection[Any]) -> EmbeddingSpace:
    """The live space, read inside the caller's transaction under the switch's shared lock
    (:data:`SPACE_FOR_WRITE`): it cannot change before the transaction ends."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(SPACE_FOR_WRITE)
        return space_of(await cursor.fetchone())


async def record_target(connection: AsyncConnection[Any], model: str, dimensions: int) -> None:
    """Name the model a re-embedding moves the vectors to (``llm-bot reembed``'s start)."""
    await connection.execute(
        "UPDATE embedding_space SET next_model = %s, next_dimensions = %s",
        (model, dimensions),
    )


async def record_switch(connection: AsyncConnection[Any], at: datetime) -> None:
    """The target's vectors are the live ones from ``at`` (the re-embedding's switch)."""
    await connection.execute(
        "UPDATE embedding_space SET model = next_model, dimensions = next_dimensions,"
        " next_model = NULL, next_dimensions = NULL, switched_at = %s",
        (at,),
    )


async def lock_for_switch(connection: AsyncConnection[Any]) -> None:
    """Wait for every transaction writing vectors to end and hold new ones off until the
    caller's transaction ends."""
    await connection.execute("SELECT pg_advisory_xact_lock(%s)", (SPACE_LOCK_ID,))
