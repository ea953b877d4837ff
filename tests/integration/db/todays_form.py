"""A database as llm-bot kept it before memories had a table of their own: our migrations up
to a version, and LangGraph's PostgresStore tables (``langgraph_store.sql``), where the worker
kept memories under the namespace ``memories.<user id>`` with ``%`` and ``.`` of the id
percent-encoded."""

from __future__ import annotations

from pathlib import Path

import psycopg

from llm_bot.db.migrate import apply_migration, available_migrations

LANGGRAPH_STORE = Path(__file__).with_name("langgraph_store.sql")


def migrate_through(url: str, version: int) -> list[str]:
    """Apply the migrations not applied yet up to ``version``, as ``llm-bot migrate`` of that
    release did; their names."""
    with psycopg.connect(url, autocommit=True) as connection:
        applied = connection.execute(
            "SELECT coalesce(max(version), 0) FROM schema_migrations"
            if _has_bookkeeping(connection)
            else "SELECT 0"
        ).fetchone()
        done = applied[0] if applied else 0
        return [
            apply_migration(connection, migration)
            for migration in available_migrations()
            if done < migration.version <= version
        ]


def _has_bookkeeping(connection: psycopg.Connection[object]) -> bool:
    row = connection.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    return bool(row and row[0])


def create_langgraph_store(url: str, dimensions: int, next_dimensions: int) -> None:
    text = LANGGRAPH_STORE.read_text(encoding="utf-8")
    sizes = text.replace("%(dims)s", str(int(dimensions)))
    sizes = sizes.replace("%(next_dims)s", str(int(next_dimensions)))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sizes.encode())


def namespace(user_id: str) -> str:
    """The ``prefix`` of ``user_id``'s memories in LangGraph's ``store``."""
    return "memories." + user_id.replace("%", "%25").replace(".", "%2E")
