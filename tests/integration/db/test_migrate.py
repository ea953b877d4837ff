"""`llm-bot migrate` against a real Postgres: creates the schema once, then changes nothing."""

from __future__ import annotations

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.db.migrate import available_migrations

pytestmark = pytest.mark.integration


def test_migrate_is_idempotent(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")  # its size is known without a call
    assert main(["migrate"]) == 0
    first = capsys.readouterr().out
    assert main(["migrate"]) == 0
    second = capsys.readouterr().out
    assert first.startswith(f"applied {len(available_migrations())} migration(s)")
    assert second.splitlines() == [
        "applied 0 migration(s): schema already current",
        "memory store ready: 384-dimension vectors",
    ]
    with psycopg.connect(fresh_database_url) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_migrations")]
    assert versions == [m.version for m in available_migrations()]
    with psycopg.connect(fresh_database_url) as connection:
        tables = connection.execute("SELECT to_regclass('store_vectors')::text").fetchone()
    assert tables == ("store_vectors",), "migrate creates the memory store's tables"
