"""Schema migrations: numbered SQL files under ``migrations/``, applied once each, in order.

Several instances may start at once (Cloud Run scale-out), so applying holds a Postgres
advisory lock; each file runs in its own transaction together with its bookkeeping row, so a
failed file leaves no half-applied state and the next run retries it.

After the migrations, on a Citus cluster, the tables are distributed
(:mod:`llm_bot.db.distribution`), under the same lock: the lock is the coordinator's, where
this connects.

A schema that is already current (and distributed, on Citus) is seen without taking the lock
(the usual start). The lock is waited for by polling ``pg_try_advisory_lock`` between short
statements, never inside one: a waiting instance holds no transaction open (which an index
built ``CONCURRENTLY`` would wait for) and gives up after ``LOCK_WAIT_S``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from llm_bot.db.distribution import distribute, undistributed
from llm_bot.settings import Settings

logger = logging.getLogger(__name__)

# Any constant works as long as every instance uses the same one.
MIGRATION_LOCK_ID = 0x11B07_0001
LOCK_POLL_S = 0.1
LOCK_WAIT_S = 300.0  # longer than any migration or index build of ours takes
# Without a connect timeout an unreachable database (a wrong host, a blackholed address) holds
# `llm-bot migrate` until the platform kills it: the Cloud Run job's task timeout, minutes on.
# One source for the default: the setting's (DATABASE_CONNECT_TIMEOUT_S).
CONNECT_TIMEOUT_S: int = Settings.model_fields["db_connect_timeout_s"].default


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """The migrations shipped in the package, ordered by their numeric prefix."""
    folder = resources.files("llm_bot.db") / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append(Migration(version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda migration: migration.version)


def migrate(database_url: str, connect_timeout_s: int = CONNECT_TIMEOUT_S) -> list[str]:
    """Bring the schema up to date; return the names of the migrations applied now."""
    with psycopg.connect(
        database_url, autocommit=True, connect_timeout=connect_timeout_s
    ) as connection:
        if not _pending(connection) and not undistributed(connection):
            return []
        with migration_lock(connection):
            applied = [apply_migration(connection, migration) for migration in _pending(connection)]
            distribute(connection)
            return applied


def _pending(connection: psycopg.Connection[Any]) -> list[Migration]:
    row = connection.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    done: set[int] = set()
    if row and row[0]:
        done = {
            version for (version,) in connection.execute("SELECT version FROM schema_migrations")
        }
    return [m for m in available_migrations() if m.version not in done]


def apply_migration(connection: psycopg.Connection[Any], migration: Migration) -> str:
    """Apply one migration and record it, in one transaction."""
    with connection.transaction():
        connection.execute(_BOOKKEEPING)
        connection.execute(migration.sql.encode())
        connection.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
            (migration.version, migration.name),
        )
    logger.info("applied migration %s", migration.name)
    return migration.name


_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())"
)


class LockTimeout(RuntimeError):
    """Another instance held the migration lock longer than any migration takes."""


@contextlib.contextmanager
def migration_lock(connection: psycopg.Connection[Any]) -> Iterator[None]:
    """Hold the migration lock on an autocommit ``connection``, polled for (see the module)."""
    give_up_at = time.monotonic() + LOCK_WAIT_S
    while not _try_lock(connection):
        if time.monotonic() >= give_up_at:
            raise LockTimeout(f"the migration lock was held for over {LOCK_WAIT_S:g} s")
        time.sleep(LOCK_POLL_S)
    try:
        yield
    finally:
        connection.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))


def _try_lock(connection: psycopg.Connection[Any]) -> bool:
    row = connection.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK_ID,)).fetchone()
    return bool(row and row[0])
