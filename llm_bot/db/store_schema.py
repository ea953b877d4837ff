"""Create or check the memory store's tables, safely from many instances starting at once.

LangGraph's ``setup()`` creates ``store`` and ``store_vectors`` (and the pgvector index, built
``CONCURRENTLY``). ``llm-bot migrate`` runs it as the documented first step; a worker's start
runs it again only when LangGraph's migration records say something is missing, and then waits
for the migration lock as :mod:`llm_bot.db.migrate` does, never inside a statement.

``CREATE TABLE IF NOT EXISTS`` would silently keep a ``store_vectors`` table of another
dimension (a known LangGraph pitfall: every insert would then fail), so the stored vectors'
model is checked against the configured one (:mod:`llm_bot.db.embedding_space`) and start-up
stops with instructions when they differ.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.store.postgres import AsyncPostgresStore
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.embedding_space import settle_space
from llm_bot.db.migrate import LOCK_POLL_S, LOCK_WAIT_S, MIGRATION_LOCK_ID, LockTimeout


async def ensure_schema(
    store: AsyncPostgresStore,
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    dimensions: int,
    model: str,
) -> None:
    async with pool.connection() as connection:
        if not await _is_current(connection, store):
            async with _store_lock(connection):
                await store.setup()
        await settle_space(connection, model, dimensions)


async def _is_current(connection: AsyncConnection[Any], store: AsyncPostgresStore) -> bool:
    """Whether LangGraph's own migration records say every store migration has run."""
    present = await _fetch_value(
        connection,
        "SELECT to_regclass('store_migrations') IS NOT NULL"
        " AND to_regclass('vector_migrations') IS NOT NULL",
    )
    if not present:
        return False
    latest = await _fetch_value(
        connection,
        "SELECT (SELECT coalesce(max(v), -1) FROM store_migrations)::text || ' '"
        " || (SELECT coalesce(max(v), -1) FROM vector_migrations)::text",
    )
    expected = f"{len(store.MIGRATIONS) - 1} {len(store.VECTOR_MIGRATIONS) - 1}"
    return bool(latest == expected)


@asynccontextmanager
async def _store_lock(connection: AsyncConnection[Any]) -> AsyncIterator[None]:
    """The migration lock, polled for between statements (see :mod:`llm_bot.db.migrate`)."""
    give_up_at = time.monotonic() + LOCK_WAIT_S
    while not await _fetch_value(connection, "SELECT pg_try_advisory_lock(%s)", MIGRATION_LOCK_ID):
        if time.monotonic() >= give_up_at:
            raise LockTimeout(f"the migration lock was held for over {LOCK_WAIT_S:g} s")
        await asyncio.sleep(LOCK_POLL_S)
    try:
        yield
    finally:
        await connection.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))


async def _fetch_value(connection: AsyncConnection[Any], query: str, *params: Any) -> Any:
    """The first column of the first row, whatever the connection's row factory."""
    row = await (await connection.execute(query, params or None)).fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
