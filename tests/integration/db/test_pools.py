"""One way to open a pool (``open_pool(settings, role)``): each role's size, waits and
statement timeout come from settings, and every connection attempt is bounded."""

from __future__ import annotations

import contextlib
import time

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import PoolTimeout

from llm_bot.db.pools import PoolRole, open_pool
from llm_bot.db.vectors import vector_param

from ...from_settings import settings_for

pytestmark = pytest.mark.integration

# Long enough for psycopg_pool's doubling backoff (1, 2, 4, 8, 16 s...) to wait 16 s between
# two attempts, the next falling 10 to 16 s after the database is back.
OUTAGE_S = 18.0

OPTIONS = {
    "LLM_BOT_MAX_IN_FLIGHT": 3,
    "LLM_BOT_DB_POOL_MAX": 10,
    "MEMORY_DB_POOL_MAX": 4,
    "MEMORY_RETRIEVAL_TIMEOUT_MS": 700,
    "MEMORY_STATEMENT_TIMEOUT_MS": 1234,
    "DATABASE_CONNECT_TIMEOUT_S": 3,
}


@pytest.mark.parametrize(
    ("role", "size", "wait_s", "statement_timeout"),
    [
        ("ledger", 3, 5.0, "0"),  # no more connections than events in flight
        ("memory", 4, 0.7, "1234ms"),
        ("setup", 4, 0.7, "0"),
    ],
)
async def test_each_role_is_shaped_by_its_settings(
    fresh_database_url: str, role: PoolRole, size: int, wait_s: float, statement_timeout: str
) -> None:
    settings = settings_for(fresh_database_url, **OPTIONS)
    async with open_pool(settings, role) as pool, pool.connection() as connection:
        assert (pool.max_size, pool.timeout) == (size, wait_s)
        cursor = await connection.execute("SHOW statement_timeout")
        row = await cursor.fetchone()
        assert row is not None
        shown = row["statement_timeout"] if isinstance(row, dict) else row[0]
        assert shown == statement_timeout
        assert connection.info.get_parameters()["connect_timeout"] == "3"


async def test_without_a_database_url_no_pool_opens() -> None:
    settings = settings_for("")
    with pytest.raises(ValueError, match="DATABASE_URL is not set"):
        async with open_pool(settings, "memory"):
            pass


async def test_vectors_are_sent_by_the_pools_connections_alone(migrated_database_url: str) -> None:
    """pgvector's dumper is registered per pool connection, never on psycopg's global
    adapters: a connection the service did not make refuses a vector."""
    vector = vector_param([0.6, 0.8])
    async with (
        open_pool(settings_for(migrated_database_url), "memory") as pool,
        pool.connection() as connection,
    ):
        cursor = await connection.execute("SELECT %s::vector::text AS v", (vector,))
        row = await cursor.fetchone()
    assert row == {"v": "[0.6,0.8]"}
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as bare:
        with pytest.raises(psycopg.ProgrammingError, match="cannot adapt"):
            await bare.execute("SELECT %s::vector", (vector,))


async def refuse_connections(
    admin: psycopg.AsyncConnection[object], database: str, refused: bool
) -> None:
    """Refuse new connections to ``database`` and end its open ones, as a database that went
    away does; or let them in again, as one that came back does (``admin``: on another)."""
    allowed = sql.Literal(not refused)
    await admin.execute(
        sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
            sql.Identifier(database), allowed
        )
    )
    if refused:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [database],
        )


async def test_a_pool_connects_again_within_seconds_of_its_database_coming_back(
    fresh_database_url: str,
) -> None:
    """Callers kept asking through the outage (events, lease renewals, the readiness probe):
    the pool still uses the database within seconds of its return, not at the next step of a
    backoff that doubled all the while it was away."""
    settings = settings_for(fresh_database_url)
    database = conninfo_to_dict(fresh_database_url)["dbname"]
    admin_url = make_conninfo(fresh_database_url, dbname="postgres")
    async with (
        open_pool(settings, "ledger") as pool,
        await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin,
    ):
        await refuse_connections(admin, database, refused=True)
        try:
            away_until = time.monotonic() + OUTAGE_S
            while time.monotonic() < away_until:
                with contextlib.suppress(PoolTimeout, psycopg.OperationalError):
                    async with pool.connection(timeout=1.0) as connection:
                        await connection.execute("SELECT 1")
        finally:
            await refuse_connections(admin, database, refused=False)
        back = time.monotonic()
        async with pool.connection(timeout=OUTAGE_S) as connection:
            await connection.execute("SELECT 1")
        waited_s = time.monotonic() - back
    assert waited_s < 6.0, f"the pool used the database again {waited_s:.1f}s after its return"
