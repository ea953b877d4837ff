"""Citus's tenants and shards are the database layer's (``llm_bot/db/``): the layers above name
rows (a user's, a thread's) and never where those rows are, so the shard key can change in
``db/`` and in the statements of the tables' owners alone.

The rule, on every module of ``llm_bot/`` outside ``llm_bot/db/``: no token of it (a name, a
string, a docstring, a comment) contains ``tenant``, ``shard`` or ``placement``, in any case
and inflection. A table's owner (:data:`tests.unit.test_table_owners.OWNERS`) writes its
tables' statements and so routes them by their distribution column: its strings and comments
may name them (the SQL, and why a statement has its shape), and its code may use the names it
imports from ``llm_bot.db`` (the tenant of a thread), but defines none of its own.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.unit.test_table_owners import OWNERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llm_bot"
DB = PACKAGE / "db"
# The words at a word's start or a name's part's (``same_tenant``, ``MarksByShard``), not
# inside another word (``REPLACEMENT``).
WORDS = re.compile(r"(?i:(?<![a-z])(?:tenant|shard|placement))|Tenant|Shard|Placement")
DB_PARTS = ["llm_bot", "db"]
PROSE = (tokenize.STRING, tokenize.COMMENT)


def imported_from_db(source: str) -> set[str]:
    """The names a module imports from ``llm_bot.db`` and its modules, with those modules'."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == DB_PARTS:
            names |= {*str(node.module).split("."), *(a.asname or a.name for a in node.names)}
    return names


def naming(source: str, owner: bool) -> Iterator[tuple[int, str]]:
    """(line, token) of every token of ``source`` that names a tenant, a shard or a
    placement against the rule (an owner's prose and its names from ``llm_bot.db`` pass)."""
    allowed = imported_from_db(source) if owner else set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if not WORDS.search(token.string):
            continue
        if owner and (token.type in PROSE or token.string in allowed):
            continue
        yield token.start[0], token.string


def findings() -> list[str]:
    owners = tuple(set(OWNERS.values()))  # a module, or a package ending in "/"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(DB):
            continue
        module = str(path.relative_to(ROOT))
        source = path.read_text(encoding="utf-8")
        found += [
            f"{module}:{line}: {text[:60]!r}"
            for line, text in naming(source, module.startswith(owners))
        ]
    return found


def test_nothing_outside_db_names_a_tenant_or_a_shard() -> None:
    assert findings() == []


def test_the_rule_reads_names_strings_and_comments() -> None:
    source = (
        "from llm_bot.db.placements import tenant_of_thread\n"
        "SQL = 'SELECT 1 FROM t WHERE tenant = %(tenant)s'  # one shard\n"
        "def placed(thread):\n"
        "    return {'tenant': tenant_of_thread(thread)}\n"
        "my_shard = 1\n"
        "REPLACEMENT = MarksByShard\n"
    )
    assert [line for line, _ in naming(source, owner=False)] == [1, 1, 2, 2, 4, 4, 5, 6]
    assert list(naming(source, owner=True)) == [(5, "my_shard"), (6, "MarksByShard")]
