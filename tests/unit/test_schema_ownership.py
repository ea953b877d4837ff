"""No SQL of ours names LangGraph's store tables: memories live in a table of ours (migration
0013), so a change LangGraph makes to its schema can break nothing here.

Scanned: every string in the package's Python code (where its SQL is, docstrings included) and
every SQL file of the package and of ``deploy/``, without its comments. Left out: the migrations
that read those tables to move the memories out of them (0012, 0013: applied history, never
edited), and their sections of ``deploy/sql/schema.sql``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOVED_OUT_BY = {"0012_private_by_default.sql", "0013_memories.sql"}

# Names only LangGraph's tables have: wherever they appear, they are those tables.
LANGGRAPH_ONLY = re.compile(r"\b(store_vectors(_next)?|store_migrations|vector_migrations)\b")
# `store` is also a word: in Python strings, it counts where SQL puts a table name.
STORE_IN_SQL = re.compile(
    r"\b(from|join|into|update|table|exists|truncate)\s+store\b|'store'", re.IGNORECASE
)
SQL_COMMENT = re.compile(r"--[^\n]*")
SCHEMA_SECTION = re.compile(r"^-- ==== (\S+) ====$", re.MULTILINE)


def python_strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def offending_strings(path: Path) -> list[tuple[int, str]]:
    return [
        (line, text)
        for line, text in python_strings(path)
        if LANGGRAPH_ONLY.search(text) or STORE_IN_SQL.search(text) or text == "store"
    ]


def sql_sections(path: Path) -> list[tuple[str, str]]:
    """(name, SQL) of a file; deploy/sql/schema.sql is one section per migration."""
    text = path.read_text(encoding="utf-8")
    names = SCHEMA_SECTION.findall(text)
    if not names:
        return [(path.name, text)]
    bodies = SCHEMA_SECTION.split(text)[2::2]
    return list(zip(names, bodies, strict=True))


def sql_offences(path: Path) -> list[tuple[str, str]]:
    """(section, name) of every LangGraph table named outside comments."""
    found = []
    for section, body in sql_sections(path):
        if section not in MOVED_OUT_BY:
            code = SQL_COMMENT.sub("", body)
            names = re.finditer(rf"{LANGGRAPH_ONLY.pattern}|\bstore\b", code)
            found += [(section, match.group(0)) for match in names]
    return found


def test_no_sql_of_ours_names_langgraphs_store_tables() -> None:
    python = sorted((ROOT / "llm_bot").rglob("*.py"))
    sql = sorted([*(ROOT / "llm_bot").rglob("*.sql"), *(ROOT / "deploy").rglob("*.sql")])
    assert len(python) > 50
    assert any(path.name in MOVED_OUT_BY for path in sql)  # the scan sees the migrations
    offences = [
        (str(path.relative_to(ROOT)), hit) for path in python for hit in offending_strings(path)
    ]
    offences += [(str(path.relative_to(ROOT)), hit) for path in sql for hit in sql_offences(path)]
    assert offences == []


def test_the_scan_finds_each_form_of_the_names(tmp_path: Path) -> None:
    """What the scan must catch, and what it must let through: English, SQL comments, the
    migrations that move the memories out."""
    source = tmp_path / "sample.py"
    source.write_text(
        '"""The memory store keeps facts."""\n'
        'A = "SELECT 1 FROM store s"\n'
        "B = f\"DELETE FROM {'store_vectors'} WHERE x\"\n"
        "C = \"SELECT to_regclass('store')\"\n"
        'D = ("store", "prefix = %s")\n',
        encoding="utf-8",
    )
    assert sorted(line for line, _ in offending_strings(source)) == [2, 3, 4, 5]
    schema = tmp_path / "schema.sql"
    schema.write_text(
        "-- ==== 0001_a.sql ====\n-- not store_vectors\nSELECT 1 FROM store;\n"
        "-- ==== 0013_memories.sql ====\nDROP TABLE store;\n",
        encoding="utf-8",
    )
    assert sql_offences(schema) == [("0001_a.sql", "store")]
