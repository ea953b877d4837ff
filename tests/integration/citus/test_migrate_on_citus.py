"""`llm-bot migrate` on a Citus coordinator: every migration applied, then every table of the
schema distributed by its tenant in one colocation group, or a reference table; a second run
changes nothing."""

from __future__ import annotations

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.db.distribution import DISTRIBUTED_TABLES, REFERENCE_TABLES
from llm_bot.db.migrate import available_migrations

pytestmark = [pytest.mark.integration, pytest.mark.citus]

# Each table: hash-distributed by its column, or a reference table (None).
DESIGN: dict[str, str | None] = {
    **dict(DISTRIBUTED_TABLES),
    **dict.fromkeys(REFERENCE_TABLES),
}
_LAYOUT = """
SELECT c.relname, p.partmethod, column_to_column_name(p.logicalrelid, p.partkey), p.colocationid
  FROM pg_class c LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
 ORDER BY c.relname
"""


def layout(url: str) -> list[tuple[str, str | None, str | None, int | None]]:
    """Every table of the schema: how it is distributed (nothing for a coordinator-local one)."""
    with psycopg.connect(url) as conn:
        return conn.execute(_LAYOUT).fetchall()


def test_migrate_distributes_every_table_once(
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
    assert versions == [migration.version for migration in available_migrations()]

    first = layout(citus_database_url)
    assert {table for table, *_ in first} == set(DESIGN), "a table the design does not place"
    for table, method, column, _ in first:
        expected = DESIGN[table]
        assert (method, column) == (("n", None) if expected is None else ("h", expected)), table
    colocation = {group for _, method, _, group in first if method == "h"}
    assert len(colocation) == 1, f"distributed tables in several colocation groups: {first}"

    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "applied 0 migration(s): schema already current"
    )
    assert layout(citus_database_url) == first
