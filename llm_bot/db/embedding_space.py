"""Which embedding model made the stored vectors, so no process mixes two models' vectors.

A vector is only comparable with vectors of the same model: a query embedded by one model
against memories or history embedded by another fails (different sizes) or, worse, returns
nonsense (same size). The ``embedding_space`` row names the model of every live vector, for
memories and history alike. Start-up refuses a model that is not that one, with the command
that moves the vectors (:func:`settle_space`).

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
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row

from llm_bot.db.turn_index import ensure_index

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


async def settle_space(
    connection: AsyncConnection[Any], model: str, dimensions: int
) -> EmbeddingSpace:
    """The stored space, recorded as ``model`` on a first start (with the index of its size
    over history, :mod:`llm_bot.db.turn_index`); raises :class:`EmbeddingModelMismatch` when
    the vectors are another model's.

    A database from before the model was recorded holds vectors of an unnamed model: if their
    size is the configured model's, they are taken to be its (the size is all that was checked
    then); otherwise start-up is refused as for a named model."""
    space = await read_space(connection)
    if space is None:
        for stored in await _legacy_dimensions(connection):
            if stored != dimensions:
                raise EmbeddingModelMismatch(
                    f"stored vectors have {stored} dimensions but the embedding model {model!r}"
                    f" produces {dimensions}. {_REMEDY}"
                )
        await connection.execute(
            "INSERT INTO embedding_space (model, dimensions) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            (model, dimensions),
        )
        space = await read_space(connection)
        if space is None:
            raise RuntimeError("embedding_space holds no row after one was recorded")
        await ensure_index(connection, space.dimensions)
    if not space.made_by(model, dimensions):
        raise EmbeddingModelMismatch(
            f"stored vectors (memories and history) were made by {space.model!r}"
            f" ({space.dimensions} dimensions) but the embedding model is {model!r}"
            f" ({dimensions} dimensions). {_REMEDY}"
        )
    return space


_REMEDY = (
    "Either set MEMORY_EMBEDDING_MODEL / MEMORY_EMBEDDING_DIMENSIONS back to the stored model,"
    " or move every vector to the new model while the workers keep running: `llm-bot reembed`"
    " with the new model configured, then deploy the workers with it."
)


async def _legacy_dimensions(connection: AsyncConnection[Any]) -> list[int]:
    """Sizes of the vectors stored before the model was recorded: one memory's and one history
    vector's."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(
            "(SELECT vector_dims(embedding) FROM memories WHERE embedding IS NOT NULL LIMIT 1)"
            " UNION ALL (SELECT vector_dims(embedding) FROM conversation_turns"
            "            WHERE embedding IS NOT NULL LIMIT 1)"
        )
        return [int(row[0]) for row in await cursor.fetchall()]


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


async def lock_for_switch(connection: AsyncConnection[Any]) -> None:
    """Wait for every transaction writing vectors to end and hold new ones off until the
    caller's transaction ends."""
    await connection.execute("SELECT pg_advisory_xact_lock(%s)", (SPACE_LOCK_ID,))
