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
    "processed_events": "llm_bot/db/processed_events/",
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


# Owners run their statements: a module that is no owner imports none of an owner's SQL (a
# module-level string, or tuple of strings, holding a statement of one of its tables) and
# reads none as an attribute of the owner's module; it calls the owner's functions instead.
SOURCES = (PACKAGE, ROOT / "tools" / "llm_bot_tools")


def module_name(path: Path) -> str:
    base = ROOT / "tools" if path.is_relative_to(ROOT / "tools") else ROOT
    return ".".join(path.relative_to(base).with_suffix("").parts)


def owner_modules() -> list[Path]:
    found: set[Path] = set()
    for owner in OWNERS.values():
        path = ROOT / owner
        found |= set(path.rglob("*.py")) if path.is_dir() else {path}
    return sorted(found)


def sql_constants(path: Path, tables: set[str]) -> set[str]:
    """The module-level names of ``path`` bound to SQL of ``tables``."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        texts = [
            part.value if isinstance(part, ast.Constant) else "{}"
            for each in ast.walk(node.value)
            if isinstance(each, ast.Constant | ast.JoinedStr)
            for part in ([each] if isinstance(each, ast.Constant) else each.values)
            if isinstance(part, ast.Constant | ast.FormattedValue)
        ]
        if any(isinstance(text, str) and table_of(text, tables) for text in texts):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def owners_sql_used_elsewhere() -> list[str]:
    tables = schema_tables()
    owned = {module_name(path): sql_constants(path, tables) for path in owner_modules()}
    found = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            module = module_name(path)
            if module in owned:
                continue
            found += [f"{module}:{line} uses {name}" for line, name in uses(path, owned)]
    return found


def uses(path: Path, owned: dict[str, set[str]]) -> Iterator[tuple[int, str]]:
    """(line, owner.NAME) of each import or attribute read of an owner's SQL in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}  # a local name -> the owner module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name in owned.get(node.module, set()):
                    yield node.lineno, f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in owned:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in owned and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr in owned[aliases[node.value.id]]
        ):
            yield node.lineno, f"{aliases[node.value.id]}.{node.attr}"


def test_no_module_but_its_owner_runs_a_tables_sql() -> None:
    assert owners_sql_used_elsewhere() == []


def test_the_rule_sees_an_imported_or_attribute_read_statement(tmp_path: Path) -> None:
    owner = tmp_path / "owner.py"
    owner.write_text(
        'GET = "SELECT key FROM memories WHERE user_id = %s"\nLIMIT = 3\n'
        'PAIR = ("SELECT 1", f"DELETE FROM memories WHERE {LIMIT}")\n',
        encoding="utf-8",
    )
    assert sql_constants(owner, {"memories"}) == {"GET", "PAIR"}
    user = tmp_path / "user.py"
    user.write_text(
        "from pkg.owner import GET, LIMIT\nfrom pkg import owner\nx = owner.PAIR, owner.LIMIT\n",
        encoding="utf-8",
    )
    owned = {"pkg.owner": {"GET", "PAIR"}}
    assert list(uses(user, owned)) == [(1, "pkg.owner.GET"), (3, "pkg.owner.PAIR")]


# The migrations' functions that write tables, each with the owner that calls it and the
# tables it writes: a write hidden in PL/pgSQL is still its tables' owners' concern.
# ``store_event_output`` also writes the answer's explanation, in the same statement as its
# output (migration 0020 says why); explanation/table.py says so.
FUNCTIONS = {
    "append_pair": (
        "llm_bot/memory/turns/",
        {"conversation_threads", "conversation_turns", "channel_turns"},
    ),
    "store_event_output": (
        "llm_bot/db/processed_events/",
        {"processed_events", "answer_explanations"},
    ),
}
FUNCTION = re.compile(
    r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\((.*?)\$\$(.*?)\$\$", re.DOTALL | re.IGNORECASE
)
WRITES = re.compile(r"\b(?:INSERT INTO|(?<!DO )UPDATE|DELETE FROM)\s+(\w+)")


def function_writes() -> dict[str, set[str]]:
    """Each migration function's name (a temporary one of a migration's own left out) and
    the tables any of its definitions writes."""
    writes: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / "db/migrations").glob("*.sql")):
        for name, _, body in FUNCTION.findall(path.read_text(encoding="utf-8")):
            writes.setdefault(name, set()).update(WRITES.findall(body))
    return {name: tables for name, tables in writes.items() if tables}


def test_a_migration_function_writes_only_the_tables_it_declares() -> None:
    assert {name: tables for name, (_, tables) in FUNCTIONS.items()} == function_writes()


def test_a_migration_function_is_called_by_its_owner_alone() -> None:
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(ROOT))
        for line, text in strings(path):
            for name, (owner, _) in FUNCTIONS.items():
                if f"{name}(" in text and not module.startswith(owner):
                    callers.append(f"{module}:{line} calls {name}")
    assert callers == []
