"""Some rows of one table, as the table's owner names them, and the one executor that deletes
or reads them whole.

Erasure deletes a user's (or a thread's) rows in every table and export reads the same rows:
each table's owner builds the :class:`Rows` (its ``FROM ... WHERE`` and parameters, so the
table's key and Citus routing stay the owner's), and these run them, so neither erasure nor
export writes a table's SQL (tests/unit/test_table_owners.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row


@dataclass(frozen=True)
class Rows:
    """Rows of ``table``: ``where`` is ``FROM <table> WHERE <condition>`` with named
    parameters, ``params`` their values."""

    table: str
    where: str
    params: Mapping[str, Any]


async def delete(connection: AsyncConnection[Any], rows: Rows) -> int:
    """``rows`` deleted; how many."""
    cursor = await connection.execute(f"DELETE {rows.where}", rows.params)
    return cursor.rowcount


async def read(connection: AsyncConnection[Any], rows: Rows) -> list[dict[str, Any]]:
    """Every column of ``rows``, by name."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(f"SELECT * {rows.where}", rows.params)
        return await cursor.fetchall()
