"""Sessions waiting on a lock, shared by the tests of what a cancellation must end: a statement
cut off on the client but not cancelled on the server would still be waiting there."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection


async def lock_waiters(connection: AsyncConnection[Any]) -> int:
    """Sessions of ``connection``'s database waiting on a lock."""
    cursor = await connection.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0])
