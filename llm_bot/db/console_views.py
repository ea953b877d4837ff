"""The operator console's audit: who viewed which user's data, on which page, when (table
``console_views``, migration 0021).

A view is recorded before the page is rendered, in a transaction of its own that may write
although the console's connections are read-only by default (:mod:`llm_bot.db.pools`, role
``console``): a page whose view could not be recorded is not shown. The rows are the viewed
user's (erasure deletes them and export shows them: :mod:`llm_bot.lifecycle.erasure`), so a
person asking what is held about them also learns who looked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from llm_bot.db.rows import Rows

RECORD = """
INSERT INTO console_views (user_id, viewed_at, viewer, page)
VALUES (%(user)s, %(at)s, %(viewer)s, %(page)s)
"""
_ROWS_OF_USER = "FROM console_views WHERE user_id = %(user)s"
RECENT = f"SELECT viewed_at, viewer, page {_ROWS_OF_USER} ORDER BY viewed_at DESC LIMIT %(limit)s"


def rows_of_user(user_id: str) -> Rows:
    """A user's rows, as erasure deletes and export reads them (:mod:`llm_bot.lifecycle`)."""
    return Rows("console_views", _ROWS_OF_USER, {"user": user_id})


@dataclass(frozen=True)
class View:
    viewed_at: datetime
    viewer: str
    page: str


async def record_view(
    connection: AsyncConnection[Any], user_id: str, viewer: str, page: str, at: datetime
) -> None:
    """Record one view, committed before this returns, on a connection whose transactions are
    read-only unless they say otherwise."""
    async with connection.transaction():
        await connection.execute("SET TRANSACTION READ WRITE")
        await connection.execute(
            RECORD, {"user": user_id, "at": at, "viewer": viewer, "page": page}
        )


async def recent_views(connection: AsyncConnection[Any], user_id: str, limit: int) -> list[View]:
    """The user's most recent views, newest first."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(RECENT, {"user": user_id, "limit": limit})
        return [View(**row) for row in await cursor.fetchall()]
