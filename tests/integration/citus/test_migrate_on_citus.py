"""`llm-bot migrate` on a Citus coordinator, with the schema as it is: every table local to
the coordinator, nothing distributed yet."""

from __future__ import annotations

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.db.migrate import available_migrations

pytestmark = [pytest.mark.integration, pytest.mark.citus]


def test_migrate_applies_every_migration_on_the_coordinator(
    citus_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DATABASE_URL", citus_database_url)
    # The size is given, so neither a model call nor a model load is needed.
    monkeypatch.setenv("MEMORY_EMBEDDING_DIMENSIONS", "384")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.startswith(f"applied {len(available_migrations())} migration(s)")
    with psycopg.connect(citus_database_url) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
        distributed = conn.execute("SELECT count(*) FROM pg_dist_partition").fetchone()
    assert versions == [migration.version for migration in available_migrations()]
    assert distributed == (0,), "the schema has no distributed table yet"
