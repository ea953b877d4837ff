"""Each table of the schema has one module that owns its SQL: whoever else reads or writes the
table (the worker's path, ``llm-bot maintain``, erasure, re-embedding) runs that module's
statements, so a change of the table's shape, key or Citus routing is made in one place.

Found by reading every string of the package's Python code (f-strings with their placeholders
left out, docstrings skipped): SQL keywords are upper case here and prose is not, so a table
named after an upper-case ``INSERT INTO``, ``UPDATE``, ``DELETE FROM``, ``TABLE`` (what the
statement writes) or else after the first ``FROM`` or ``JOIN`` (what it reads first) is the
statement's table. A statement may read other tables (a join, an ``EXISTS``); it lives with the
table it writes, or first reads. The migrations create the tables and are nobody's statements.

Not seen: a table name put into SQL at run time (the re-embedding's column swaps over
:data:`llm_bot.lifecycle.vector_slots.TABLES`, the same DDL for each table of a list), and an
index's DDL, which names its table after ``ON`` (the recall index's, :mod:`llm_bot.db.turn_index`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llm_bot"

OWNERS = {
    "memories": "llm_bot/memory/memories.py",
    "memory_versions": "llm_bot/memory/versions.py",
    "conversation_turns": "llm_bot/memory/turns/",
    "conversation_threads": "llm_bot/memory/turns/",
    "channel_turns": "llm_bot/memory/turns/",
    "agent_notes": "llm_bot/memory/notes_store.py",
    "personalities": "llm_bot/db/personalities.py",
    "processed_events": "llm_bot/db/processed_events.py",
    "tool_calls": "llm_bot/platform_tools/ledger.py",
    "embedding_space": "llm_bot/db/embedding_space.py",
    "schema_migrations": "llm_bot/db/migrate.py",
    "console_views": "llm_bot/db/console_views.py",
    "answer_explanations": "llm_bot/explanation/table.py",
}

WRITTEN = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM|TABLE(?: IF (?:NOT )?EXISTS)?)\s+(\w+)")
READ = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)")
CREATED = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)")


def schema_tables() -> set[str]:
    """Every table the migrations create, and the migrations' own record."""
    sql = "".join(path.read_text() for path in (PACKAGE / "db/migrations").glob("*.sql"))
    return {*CREATED.findall(sql), "schema_migrations"}


def strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string of a module but its docstrings; an f-string's
    placeholders become ``{}``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    inside_fstrings = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
            )
            yield node.lineno, text
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings | inside_fstrings
        ):
            yield node.lineno, node.value


def table_of(statement: str, tables: set[str]) -> str | None:
    """The table a statement writes, else the first it reads; None when it names none of
    ours."""
    for pattern in (WRITTEN, READ):
        for name in pattern.findall(statement):
            if name in tables:
                return str(name)
    return None


def statements_outside_owners() -> list[str]:
    tables = schema_tables()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(ROOT))
        for line, text in strings(path):
            table = table_of(text, tables)
            if table is not None and not module.startswith(OWNERS[table]):
                found.append(f"{module}:{line} holds SQL of {table} (owner {OWNERS[table]})")
    return found


def test_every_table_has_an_owner() -> None:
    assert schema_tables() == set(OWNERS)
    assert all((ROOT / module).exists() for module in OWNERS.values())


def test_each_tables_sql_is_in_its_owner() -> None:
    assert statements_outside_owners() == []


def test_the_rule_finds_the_statements_table() -> None:
    tables = {"memories", "memory_versions", "conversation_turns"}
    assert table_of("SELECT key FROM memories WHERE user_id = %s", tables) == "memories"
    assert table_of("INSERT INTO memory_versions SELECT * FROM memories m", tables) == (
        "memory_versions"
    )
    assert table_of("WITH th AS (SELECT 1 FROM memories) DELETE FROM conversation_turns", tables)
    assert table_of("SELECT 1 FROM pg_class JOIN memories ON true", tables) == "memories"
    assert table_of("ALTER TABLE memories ADD COLUMN x int", tables) == "memories"
    assert table_of("the memories, read from memories by the update", tables) is None


def test_the_scan_reads_fstrings_and_skips_docstrings(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        '"""Rows FROM memories, as prose quotes them."""\n'
        'A = f"DELETE FROM memories WHERE {B}"\n'
        'C = ("SELECT 1 FROM"\n     " memories")\n',
        encoding="utf-8",
    )
    tables = {"memories"}
    assert [line for line, text in strings(source) if table_of(text, tables)] == [2, 3]
