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

An owner also runs its statements: no other module of the service or of the development tools
executes, or composes SQL of, an owner's SQL constant, so what a statement returns and how its
rows read are the owner's too. Found by reading each module's imports and attributes: a name
imported from an owner module, or an owner module's attribute, whose value there is SQL of one
of the owner's tables (a string, or a tuple of strings, judged as above) is a use of the
owner's statement. An owner's other constants (numbers, specs) are anyone's.

A function the migrations create is a statement too, run by whoever calls it: each one that
writes a table (``INSERT``, ``UPDATE``, ``DELETE``, its own or through a function it calls) is
declared below with the owner that calls it and the tables it writes, and no other module calls
it. Each signature's latest definition is the one that stands; a name's overloads all do.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llm_bot"
DEV_TOOLS = ROOT / "tools/llm_bot_tools"

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

# The migrations' functions that write tables: the owner module (or package) that calls each,
# and the tables it writes; a write hidden in PL/pgSQL is still its tables' owners' concern.
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

WRITTEN = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM|TABLE(?: IF (?:NOT )?EXISTS)?)\s+(\w+)")
READ = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)")
CREATED = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)")
CHANGED = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM)\s+(\w+)")
FUNCTION = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION (\w+(?:\.\w+)?)\s*\(([^)]*)\)")
DOLLAR_QUOTE = re.compile(r"\$(\w*)\$")
SQL_COMMENT = re.compile(r"--[^\n]*")


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


def owner_path(module: str) -> str | None:
    """The owner (a value of :data:`OWNERS`) a module is, or is in; None for any other."""
    return next((owner for owner in OWNERS.values() if module.startswith(owner)), None)


def dotted(path: Path) -> str:
    """A module's import name: the service's from the root, the development tools' from
    ``tools/``."""
    root = ROOT / "tools" if path.is_relative_to(DEV_TOOLS) else ROOT
    return ".".join(path.relative_to(root).with_suffix("").parts)


def calls(text: str, function: str) -> bool:
    return re.search(rf"\b{re.escape(function)}\s*\(", text) is not None


def holds_sql(value: object, tables: set[str], own: set[str], functions: set[str]) -> bool:
    """Whether a constant's value is SQL of one of ``own``: a string (or a tuple of strings)
    whose statement's table is one of them, or that calls one of ``functions``, which write
    them."""
    if isinstance(value, tuple):
        return any(holds_sql(item, tables, own, functions) for item in value)
    return isinstance(value, str) and (
        table_of(value, tables) in own or any(calls(value, name) for name in functions)
    )


def owners_sql_constants() -> dict[str, set[str]]:
    """Each owner module's names (by its import name) whose value is SQL of its owner's
    tables."""
    tables = schema_tables()
    constants = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        owner = owner_path(str(path.relative_to(ROOT)))
        if owner is not None:
            own = {table for table, module in OWNERS.items() if module == owner}
            functions = {name for name, (module, _) in FUNCTIONS.items() if module == owner}
            names = vars(importlib.import_module(dotted(path)))
            constants[dotted(path)] = {
                name for name, value in names.items() if holds_sql(value, tables, own, functions)
            }
    return constants


def imported_from(node: ast.ImportFrom, module: str) -> str:
    """The import name of the module ``from ... import`` reads in ``module``."""
    if node.level == 0:
        return str(node.module)
    package = module.split(".")[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def uses(path: Path, module: str, constants: dict[str, set[str]]) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of each of ``constants`` (names by their module's import name) the
    module ``module`` at ``path`` imports, or reads as its module's attribute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bound = {}  # a local name -> the import name it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = imported_from(node, module)
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{source}.{alias.name}"
                if alias.name in constants.get(source, set()):
                    yield node.lineno, source, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                bound[local] = alias.name if alias.asname else local
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                source = ".".join([bound[value.id], *chain])
                if node.attr in constants.get(source, set()):
                    yield node.lineno, source, node.attr


def owners_sql_used_outside() -> list[str]:
    constants = owners_sql_constants()
    owners = {module: owner_path(module.replace(".", "/") + ".py") for module in constants}
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *DEV_TOOLS.rglob("*.py")]):
        module = str(path.relative_to(ROOT))
        for line, source, name in uses(path, dotted(path), constants):
            if owners[source] != owner_path(module):
                found.append(f"{module}:{line} uses {source}.{name} (owner {owners[source]})")
    return found


def body_of(definition: str) -> str:
    """A function's body from the text after its arguments: between its dollar quotes, or up
    to the ``;`` that ends a ``RETURN`` body."""
    end = definition.index(";")
    quote = DOLLAR_QUOTE.search(definition, 0, end)
    if quote is None:
        return definition[:end]
    return definition[quote.end() : definition.index(quote.group(0), quote.end())]


def functions_of(migrations: list[str]) -> dict[str, list[str]]:
    """The bodies of each function the migrations (in order) leave, by name: a signature's
    latest definition, every overload of a name; comments left out, and ``pg_temp``'s, a
    migration's own, too."""
    defined = {}
    for sql in migrations:
        code = SQL_COMMENT.sub("", sql)
        for match in FUNCTION.finditer(code):
            name, arguments = match.groups()
            if not name.startswith("pg_temp."):
                defined[name, " ".join(arguments.split())] = body_of(code[match.end() :])
    bodies: dict[str, list[str]] = {}
    for (name, _), body in defined.items():
        bodies.setdefault(name, []).append(body)
    return bodies


def writes_of(bodies: dict[str, list[str]], tables: set[str]) -> dict[str, set[str]]:
    """The tables each function writes, itself or through the functions it calls."""
    writes = {
        name: {table for body in texts for table in CHANGED.findall(body) if table in tables}
        for name, texts in bodies.items()
    }
    callees = {
        name: {
            other for other in bodies if other != name and any(calls(body, other) for body in texts)
        }
        for name, texts in bodies.items()
    }
    while True:
        grown = {
            name: written.union(*(writes[callee] for callee in callees[name]))
            for name, written in writes.items()
        }
        if grown == writes:
            return writes
        writes = grown


def migration_function_writes() -> dict[str, set[str]]:
    migrations = sorted((PACKAGE / "db/migrations").glob("*.sql"))
    bodies = functions_of([path.read_text(encoding="utf-8") for path in migrations])
    return {name: tables for name, tables in writes_of(bodies, schema_tables()).items() if tables}


def function_calls_outside_owners() -> list[str]:
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *DEV_TOOLS.rglob("*.py")]):
        module = str(path.relative_to(ROOT))
        for line, text in strings(path):
            for name, (owner, _) in FUNCTIONS.items():
                if calls(text, name) and not module.startswith(owner):
                    found.append(f"{module}:{line} calls {name} (owner {owner})")
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


def test_no_other_module_runs_an_owners_statement() -> None:
    assert owners_sql_used_outside() == []


def test_the_rule_finds_a_use_of_an_owners_statement(tmp_path: Path) -> None:
    tables, own, functions = {"memories", "agent_notes"}, {"memories"}, {"put_memory"}
    assert holds_sql("SELECT key FROM memories WHERE user_id = %s", tables, own, functions)
    assert holds_sql(("SELECT 1 FROM pg_class", "DELETE FROM memories"), tables, own, functions)
    assert holds_sql("SELECT put_memory(%s, %s)", tables, own, functions)
    assert not holds_sql("SELECT content FROM agent_notes", tables, own, functions)
    assert not holds_sql(1000, tables, own, functions)
    assert not holds_sql("the memories, as read", tables, own, functions)
    source = tmp_path / "sample.py"
    source.write_text(
        "import llm_bot.memory.memories\n"
        "import llm_bot.db.ledger as ledger\n"
        "from llm_bot.memory import memories\n"
        "from llm_bot.memory.memories import LIMIT, PUT\n"
        "memories.GET, memories.LIMIT\n"
        "llm_bot.memory.memories.GET\n"
        "ledger.CLAIM\n"
        "from .memory.memories import GET\n",
        encoding="utf-8",
    )
    constants = {"llm_bot.memory.memories": {"PUT", "GET"}, "llm_bot.db.ledger": {"CLAIM"}}
    assert sorted(uses(source, "llm_bot.sample", constants)) == [
        (4, "llm_bot.memory.memories", "PUT"),
        (5, "llm_bot.memory.memories", "GET"),
        (6, "llm_bot.memory.memories", "GET"),
        (7, "llm_bot.db.ledger", "CLAIM"),
        (8, "llm_bot.memory.memories", "GET"),
    ]


def test_each_function_that_writes_is_declared_with_its_tables() -> None:
    declared = {name: tables for name, (_, tables) in FUNCTIONS.items()}
    assert migration_function_writes() == declared
    assert all(owner in {OWNERS[table] for table in tables} for owner, tables in FUNCTIONS.values())


def test_a_function_that_writes_is_called_by_its_owner_alone() -> None:
    assert function_calls_outside_owners() == []


def test_the_rule_finds_what_a_function_writes() -> None:
    """A replaced definition stands no longer, an overload does, a call writes what its
    function writes, and neither a comment nor a migration's own function counts."""
    migrations = [
        "CREATE FUNCTION f(a int) RETURNS void LANGUAGE sql AS $$ DELETE FROM t1 $$;\n"
        "CREATE FUNCTION g(a int) RETURNS void LANGUAGE plpgsql AS $body$\n"
        "BEGIN UPDATE t3 SET x = 1; END $body$;\n"
        "CREATE FUNCTION pg_temp.h() RETURNS void LANGUAGE sql AS $$ DELETE FROM t4 $$;\n",
        "-- f no longer does INSERT INTO t1\n"
        "CREATE OR REPLACE FUNCTION f(a int) RETURNS void LANGUAGE sql AS\n"
        "$$ INSERT INTO t2 SELECT 1 $$;\n"
        "CREATE FUNCTION g(a int, b int) RETURNS void LANGUAGE sql AS $$ SELECT f(a) $$;\n"
        "CREATE FUNCTION k(a int) RETURNS int LANGUAGE sql RETURN (SELECT a FROM t1);\n",
    ]
    bodies = functions_of(migrations)
    assert writes_of(bodies, {"t1", "t2", "t3", "t4"}) == {
        "f": {"t2"},
        "g": {"t2", "t3"},
        "k": set(),
    }
