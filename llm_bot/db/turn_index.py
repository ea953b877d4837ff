"""The approximate nearest-neighbour index over history vectors, for users too deep to scan.

``conversation_turns.embedding`` has no fixed size (the embedding model is a setting,
:mod:`llm_bot.db.embedding_space`), and pgvector indexes only sized columns. The index is
therefore on an expression with the size of the current space, ``embedding::halfvec(D)``,
partial on ``indexed AND vector_dims(embedding) = D`` (the predicate is checked before the
cast, so a vector of another size is left out instead of failing the write). A query uses it by
naming the same expression and predicate (:func:`near_distance`, :func:`in_space`).

``indexed``: only the turns of deep users, whose recall reads the index, enter it. The writer
sets it when recall found the requesting user deep (:mod:`llm_bot.memory.recall`), ``llm-bot
maintain`` on the older turns of a user who became deep (:mod:`llm_bot.lifecycle.turn_backfill`);
a typical user's turn costs a btree insertion instead of an HNSW one (docs/performance.md,
"Recall at depth"). ``halfvec`` rather than
``vector``: half the index (223 MB instead of 391 MB over 200k turns), so twice as much of it
stays in memory, for a candidate list whose exact similarity is computed from the full vector
anyway. HNSW indexes ``halfvec`` up to ``MAX_INDEXED_DIMENSIONS``; a larger model goes
unindexed, and its deep users are scanned.

One index per slot (:mod:`llm_bot.lifecycle.vector_slots`): ``llm-bot reembed`` builds the
new model's index on ``embedding_next`` once its vectors are there, and the switch renames it
with the column, while the old one goes with the dropped column. Migration ``0015`` builds the
live one for a recorded space, :func:`llm_bot.memory.store.settle_space` when it records
one, and ``llm-bot reembed`` with the live model rebuilds one that is missing or invalid.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import tuple_row

MAX_INDEXED_DIMENSIONS = 4000  # pgvector's limit for an HNSW index on halfvec
LIVE_COLUMN = "embedding"
SHADOW_COLUMN = "embedding_next"

# A deep user's turns are a share of the table: the index is walked until enough of theirs
# pass the filter (pgvector >= 0.8), in roughly nearest-first order.
SEARCH_SETTINGS = ("hnsw.iterative_scan", "relaxed_order")


def in_space(column: str, dimensions: int) -> str:
    """The index's predicate, which a query must repeat to use it."""
    return f"indexed AND vector_dims({column}) = {int(dimensions)}"


def near_distance(column: str, dimensions: int) -> str:
    """The distance to the ``%(vector)s`` parameter, as the index orders it. The parameter is
    read as a ``vector`` and converted: it is sent in ``vector``'s binary form
    (:mod:`llm_bot.db.vectors`), which a ``halfvec`` parameter would not accept."""
    size = int(dimensions)
    return f"({column}::halfvec({size}) <=> %(vector)s::vector::halfvec({size}))"


# Held by the instance building an index (ensure_index); any constant shared by every instance.
BUILD_LOCK_ID = 0x11B07_0004
LOCK_POLL_S = 0.1


def index_name(column: str, dimensions: int) -> str:
    return f"conversation_turns_{column}_{int(dimensions)}_hnsw"


async def ensure_index(
    connection: AsyncConnection[Any], dimensions: int, column: str = LIVE_COLUMN
) -> bool:
    """Build the index of ``column`` for ``dimensions`` unless a valid one is there; True when
    it built one. ``connection`` is in autocommit: the build is concurrent (writes go on), and
    one a failed build left invalid is dropped first.

    Instances starting together would each build it, and one would drop the other's build in
    progress as invalid (on Citus, two concurrent builds fail inside Citus: "could not open
    relation with OID 0"): the builder holds a session lock, and an instance that finds it
    taken waits for it and then finds the index built. The lock is polled for between short
    statements, never waited for inside one: a statement waiting would hold a snapshot that the
    concurrent build waits for in turn."""
    if dimensions > MAX_INDEXED_DIMENSIONS:
        return False
    while True:
        if await _try_lock(connection):
            break
        await asyncio.sleep(LOCK_POLL_S)
    try:
        return await _build_unless_valid(connection, dimensions, column)
    finally:
        await connection.execute("SELECT pg_advisory_unlock(%s)", (BUILD_LOCK_ID,))


async def _try_lock(connection: AsyncConnection[Any]) -> bool:
    async with connection.cursor(row_factory=tuple_row) as cursor:  # whatever the connection's
        await cursor.execute("SELECT pg_try_advisory_lock(%s)", (BUILD_LOCK_ID,))
        row = await cursor.fetchone()
    return bool(row and row[0])


async def _build_unless_valid(
    connection: AsyncConnection[Any], dimensions: int, column: str
) -> bool:
    name = index_name(column, dimensions)
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)", (name,)
        )
        row = await cursor.fetchone()
    if row is not None and row[0]:
        return False
    if row is not None:
        await connection.execute(
            sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name))
        )
    await connection.execute(index_definition(column, dimensions, concurrently=True))
    return True


def index_definition(column: str, dimensions: int, *, concurrently: bool = False) -> sql.Composed:
    size = int(dimensions)
    return sql.SQL(
        "CREATE INDEX {how} IF NOT EXISTS {name} ON conversation_turns"
        " USING hnsw (({column}::halfvec({size})) halfvec_cosine_ops)"
        " WHERE indexed AND vector_dims({column}) = {size}"
    ).format(
        how=sql.SQL("CONCURRENTLY" if concurrently else ""),
        name=sql.Identifier(index_name(column, size)),
        column=sql.Identifier(column),
        size=sql.Literal(size),
    )


async def promote_shadow_index(connection: AsyncConnection[Any], dimensions: int) -> None:
    """At the switch, after ``embedding_next`` became ``embedding``: its index takes the live
    name (the old live index went with the old column)."""
    await connection.execute(
        sql.SQL("ALTER INDEX IF EXISTS {} RENAME TO {}").format(
            sql.Identifier(index_name(SHADOW_COLUMN, dimensions)),
            sql.Identifier(index_name(LIVE_COLUMN, dimensions)),
        )
    )
