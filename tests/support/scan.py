"""Where words survive: every column of every table of the schema, found from the catalog, so
a table added later is scanned too. Shared by the erasure tests, whoever's rows they fill."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg import sql


def occurrences(url: str, needles: list[str]) -> dict[str, int]:
    """Rows holding each needle, over every column of every table of the current schema."""
    with psycopg.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name, udt_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND udt_name <> 'vector'"
        ).fetchall()
        assert {table for table, _, _ in columns} >= {"memories", "processed_events", "agent_notes"}
        return counted(connection, columns, needles)


def counted(
    connection: psycopg.Connection[tuple[str, ...]],
    columns: Iterable[tuple[str, str, str]],
    needles: list[str],
) -> dict[str, int]:
    """Rows holding each needle (case aside) in ``columns`` (table, column, type name), each
    read as text (a ``bytea`` as escaped text)."""
    found = dict.fromkeys(needles, 0)
    count = sql.SQL("SELECT count(*) FROM {} WHERE strpos(lower({}), lower(%s)) > 0")
    for table, column, kind in columns:
        text = "encode({}, 'escape')" if kind == "bytea" else "{}::text"
        statement = count.format(
            sql.Identifier(table), sql.SQL(text).format(sql.Identifier(column))
        )
        for needle in needles:
            row = connection.execute(statement, (needle,)).fetchone()
            found[needle] += int(row[0]) if row else 0
    return found
