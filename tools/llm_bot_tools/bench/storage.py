"""What a row costs on disk: what each table's heap, TOAST and indexes grew by over the rows
the real write path added to it.

The rows are left as the workers wrote them, dead versions of updated rows and the indexes'
free space included (autovacuum on, as in production), since that is what a disk holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psycopg
from psycopg import sql

_SIZES = """
SELECT c.relname,
       pg_table_size(c.oid) - coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0),
       coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0),
       coalesce((SELECT json_object_agg(i.relname, pg_total_relation_size(i.oid))
                   FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                  WHERE x.indrelid = c.oid), '{}')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
 ORDER BY c.relname
"""


@dataclass(frozen=True)
class TableSize:
    table: str
    rows: int
    heap_bytes: int  # main fork, free space and visibility maps
    toast_bytes: int  # the TOAST table and its index
    index_bytes: dict[str, int]  # each index, every fork

    @property
    def total_bytes(self) -> int:
        return self.heap_bytes + self.toast_bytes + sum(self.index_bytes.values())

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"total_bytes": self.total_bytes}


@dataclass(frozen=True)
class RowCost:
    """A table's bytes per row: what it grew by over the ``rows`` it gained."""

    table: str
    rows: int
    bytes_per_row: float
    heap_per_row: float
    toast_per_row: float
    index_per_row: dict[str, float]
    size: TableSize

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"size": self.size.as_dict()}


def table_sizes(url: str) -> dict[str, TableSize]:
    """Every table of the ``public`` schema, with its exact row count."""
    sizes = {}
    with psycopg.connect(url, autocommit=True) as connection:
        for name, heap, toast, indexes in connection.execute(_SIZES).fetchall():
            count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))
            row = connection.execute(count).fetchone()
            rows = int(row[0]) if row else 0
            sizes[name] = TableSize(name, rows, int(heap), int(toast), dict(indexes))
    return sizes


def row_costs(before: dict[str, TableSize], after: dict[str, TableSize]) -> list[RowCost]:
    """Bytes per row of each table that gained rows from ``before`` to ``after``: what the
    table grew by over the rows it gained."""
    costs = []
    for name, size in after.items():
        was = before.get(name, TableSize(name, 0, 0, 0, {}))
        rows = size.rows - was.rows
        if rows <= 0:
            continue
        costs.append(
            RowCost(
                table=name,
                rows=rows,
                bytes_per_row=(size.total_bytes - was.total_bytes) / rows,
                heap_per_row=(size.heap_bytes - was.heap_bytes) / rows,
                toast_per_row=(size.toast_bytes - was.toast_bytes) / rows,
                index_per_row={
                    index: (bytes_ - was.index_bytes.get(index, 0)) / rows
                    for index, bytes_ in size.index_bytes.items()
                },
                size=size,
            )
        )
    return costs
