"""Create or check the memory store's tables, once per start, safely from many instances.

LangGraph's ``setup()`` creates ``store`` and ``store_vectors`` (and the pgvector index).
``CREATE TABLE IF NOT EXISTS`` would silently keep a
``store_vectors`` table of another dimension (a known LangGraph pitfall: every insert would then
fail), so the stored dimension is checked against the embedding model's and start-up stops
with instructions when they differ.
"""

from __future__ import annotations

from typing import Any

from langgraph.store.postgres import AsyncPostgresStore
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.migrate import MIGRATION_LOCK_ID


class DimensionMismatch(RuntimeError):
    """Stored vectors and the embedding model disagree on size; no write could succeed."""


async def ensure_schema(
    store: AsyncPostgresStore,
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    dimensions: int,
    model: str,
) -> None:
    async with pool.connection() as lock_holder:
        await lock_holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
        try:
            await store.setup()
            stored = await stored_dimensions(lock_holder)
        finally:
            await lock_holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    if stored is not None and stored != dimensions:
        raise DimensionMismatch(
            f"memory vectors in the database have {stored} dimensions but the embedding model"
            f" {model!r} produces {dimensions}. Either set MEMORY_EMBEDDING_MODEL /"
            f" MEMORY_EMBEDDING_DIMENSIONS back to a {stored}-dimension model, or re-embed"
            " every memory with the new one: `llm-bot memories reembed`."
        )


async def stored_dimensions(connection: AsyncConnection[Any]) -> int | None:
    """Size of ``store_vectors.embedding`` as declared in the catalog (None if no table)."""
    cursor = await connection.execute(
        "SELECT atttypmod FROM pg_attribute"
        " WHERE attrelid = to_regclass('store_vectors') AND attname = 'embedding'"
    )
    row = await cursor.fetchone()
    if row is None:
        return None
    value = row["atttypmod"] if isinstance(row, dict) else row[0]
    return int(value) if value and value > 0 else None


async def drop_vectors(connection: AsyncConnection[Any]) -> None:
    """Forget every stored vector so ``setup()`` recreates the table at the new size."""
    await connection.execute("DROP TABLE IF EXISTS store_vectors")
    await connection.execute("DROP TABLE IF EXISTS vector_migrations")
