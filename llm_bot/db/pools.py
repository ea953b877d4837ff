"""The service's connection pools, each opened by :func:`open_pool` from settings for its role.

- ``ledger``: claims, leases, the group commit (with the memory writes it carries) and the
  processed-events ledger. At most ``LLM_BOT_DB_POOL_MAX`` connections, and no more than
  events in flight; each connection is checked before use, so one the server dropped while it
  sat idle is replaced rather than handed to a batch of the group commit.
- ``memory``: the memory store's reads (retrieval, memory tools, personalities, the memory
  commands). At most ``MEMORY_DB_POOL_MAX``; a caller waits for a free connection no longer
  than retrieval may take (``MEMORY_RETRIEVAL_TIMEOUT_MS``), and the server ends any statement
  past ``MEMORY_STATEMENT_TIMEOUT_MS``. Not checked before use (a round trip per read, several
  per event): a read that meets a dropped connection fails, and retrieval goes without that
  part. Rows come as dicts.
- ``setup``: the memory store's pool for work that may run long (loading a benchmark's data):
  no statement timeout.
- ``console``: the operator console's (``llm-bot console``): the memory pool's shape, and every
  transaction read-only unless it says otherwise (only the console's audit does,
  :mod:`llm_bot.db.console_views`), beside the read-only database role it is meant to log in
  as (migration 0021).

Every connection attempt gives up after ``DATABASE_CONNECT_TIMEOUT_S``, and opening a pool
waits that long for its first connection. A pool retries a connection it lost (psycopg_pool's
backoff, doubling from a second) for that long too, then leaves it to the next caller to
connect afresh: a backoff left to double for the whole outage (psycopg_pool's own bound is five
minutes) would make its next attempt as long after the database came back as the database had
been away, the worker idle and not ready all the while. Each instance holds up to both pools'
sizes (README, "Sizing the database").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.turn_index import SEARCH_SETTINGS
from llm_bot.db.vectors import register_vectors
from llm_bot.settings import Settings

PoolRole = Literal["ledger", "memory", "setup", "console"]
Pool = AsyncConnectionPool[AsyncConnection[Any]]
# Writes go through the group committer (one connection at a time, more only while a batch
# stalls) and reads are short, so a ledger connection is free again well within this.
LEDGER_WAIT_S = 5.0


@dataclass(frozen=True)
class PoolShape:
    max_size: int
    wait_s: float  # the longest a caller waits for a free connection
    statement_timeout_ms: int  # 0: none
    checked: bool  # each connection is checked before use
    dict_rows: bool
    read_only: bool = False  # transactions are read-only by default


def shape_of(settings: Settings, role: PoolRole) -> PoolShape:
    if role == "ledger":
        size = max(2, min(settings.max_in_flight, settings.db_pool_max))
        return PoolShape(size, LEDGER_WAIT_S, 0, checked=True, dict_rows=False)
    timeout_ms = settings.memory_statement_timeout_ms if role != "setup" else 0
    wait_s = settings.retrieval_timeout_ms / 1000
    return PoolShape(
        settings.memory_db_pool_max,
        wait_s,
        timeout_ms,
        checked=False,
        dict_rows=True,
        read_only=role == "console",
    )


@asynccontextmanager
async def open_pool(settings: Settings, role: PoolRole) -> AsyncIterator[Pool]:
    """A pool for ``role``, open (its first connection made) until the block ends."""
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set")
    shape = shape_of(settings, role)
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": settings.db_connect_timeout_s,
    }
    if shape.dict_rows:
        kwargs |= {"row_factory": dict_row, "prepare_threshold": 0}
    pool: Pool = AsyncConnectionPool(
        settings.database_url.get_secret_value(),
        min_size=1,
        max_size=shape.max_size,
        timeout=shape.wait_s,
        kwargs=kwargs,
        configure=_configure(shape),
        check=AsyncConnectionPool.check_connection if shape.checked else None,
        reconnect_timeout=settings.db_connect_timeout_s,
        open=False,
    )
    await pool.open(wait=True, timeout=settings.db_connect_timeout_s)
    try:
        yield pool
    finally:
        await pool.close()


def _configure(shape: PoolShape) -> Callable[[AsyncConnection[Any]], Awaitable[None]]:
    """Run on each connection as the pool makes it: pgvector's dumper
    (:func:`~llm_bot.db.vectors.register_vectors`), how an HNSW index is walked
    (:data:`~llm_bot.db.turn_index.SEARCH_SETTINGS`), the statement timeout, so the server
    itself ends a runaway statement, whoever runs it and even if the process is gone, and for a
    read-only pool, read-only transactions by default. They are set by a statement, not by the
    URL's ``options``, which a URL may already carry (a search path)."""

    async def configure(connection: AsyncConnection[Any]) -> None:
        register_vectors(connection)
        settings = [SEARCH_SETTINGS]
        if shape.statement_timeout_ms:
            settings.append(("statement_timeout", f"{shape.statement_timeout_ms}ms"))
        if shape.read_only:
            settings.append(("default_transaction_read_only", "on"))
        await connection.execute(
            "SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(settings)),
            [value for setting in settings for value in setting],
        )

    return configure
