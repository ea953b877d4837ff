"""Where words survive: every column of every table of the schema, found from the catalog, so
a table added later is scanned too. Shared by the erasure tests, whoever's rows they fill."""

from __future__ import annotations

import psycopg


def occurrences(url: str, needles: list[str]) -> dict[str, int]:
    """Rows holding each needle, over every column of every table of the current schema."""
    found = dict.fromkeys(needles, 0)
    with psycopg.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name, udt_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND udt_name <> 'vector'"
        ).fetchall()
        assert {table for table, _, _ in columns} >= {"memories", "processed_events", "agent_notes"}
        for table, column, kind in columns:
            as_text = f"encode(\"{column}\", 'escape')" if kind == "bytea" else f'"{column}"::text'
            for needle in needles:
                row = connection.execute(
                    f'SELECT count(*) FROM "{table}" WHERE strpos(lower({as_text}), lower(%s)) > 0',
                    (needle,),
                ).fetchone()
                found[needle] += row[0] if row else 0
    return found
