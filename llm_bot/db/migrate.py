"""Schema migrations: numbered SQL files under ``migrations/``, applied once each, in order.

Several instances may start at once (Cloud Run scale-out), so the whole run holds a Postgres
advisory lock; each file runs in its own transaction together with its bookkeeping row, so a
failed file leaves no half-applied state and the next run retries it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources

import psycopg

logger = logging.getLogger(__name__)

# Any constant works as long as every instance uses the same one.
MIGRATION_LOCK_ID = 0x11B07_0001


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


def migrate(database_url: str) -> list[str]:
    """Bring the schema up to date; return the names of the migrations applied now."""
    applied_now: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
        try:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in connection.execute("SELECT version FROM schema_migrations")}
            for migration in available_migrations():
                if migration.version in done:
                    continue
                with connection.transaction():
                    connection.execute(migration.sql.encode())
                    connection.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                logger.info("applied migration %s", migration.name)
                applied_now.append(migration.name)
        finally:
            connection.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    return applied_now
