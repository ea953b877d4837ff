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
    assert main(["migrate"]) == 0
    first = capsys.readouterr().out
    assert main(["migrate"]) == 0
    second = capsys.readouterr().out
    assert first.startswith(f"applied {len(available_migrations())} migration(s)")
    assert second.strip() == "applied 0 migration(s): schema already current"
    with psycopg.connect(fresh_database_url) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_migrations")]
    assert versions == [m.version for m in available_migrations()]
