"""The ``answer_explanations`` table's statements, in the one module that owns them (the
convention of docs/architecture.md: a table's columns, key and Citus routing change here).

No statement here writes a record: the statement that stores the event's output does
(``store_event_output``, migration 0020, run by :func:`llm_bot.db.processed_events.store_output`
with the record as one more argument), so an answered event sends no statement of its own for
its explanation. What is here reads the rows, for the reader
(:mod:`llm_bot.explanation.reader`), and names them for erasure, export and retention
(:mod:`llm_bot.lifecycle`), which need nothing else of an explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row

from llm_bot.db.rows import Rows


# Erasure's and export's rows (:mod:`llm_bot.lifecycle.erasure`): a user's explanations, a
# thread's.
def rows_of_user(user_id: str) -> Rows:
    where = "FROM answer_explanations WHERE user_id = %(user)s"
    return Rows("answer_explanations", where, {"user": user_id})


def rows_of_thread(thread_id: str) -> Rows:
    where = "FROM answer_explanations WHERE thread_id = %(thread)s"
    return Rows("answer_explanations", where, {"thread": thread_id})


# Retention's (:mod:`llm_bot.lifecycle.retention`): kept as long as the event records.
_EXPIRED = """
DELETE FROM answer_explanations e USING (
    SELECT user_id, correlation_id FROM answer_explanations
     WHERE created_at < %(cutoff)s LIMIT %(batch)s) old
 WHERE e.user_id = old.user_id AND e.correlation_id = old.correlation_id
"""


async def delete_expired(connection: AsyncConnection[Any], cutoff: datetime, batch: int) -> int:
    """Up to ``batch`` explanations written before ``cutoff``; rows deleted."""
    params = {"cutoff": cutoff, "batch": batch}
    return (await connection.execute(_EXPIRED, params)).rowcount


# ``llm-bot explain`` names the event, not its user: the newest record of that id.
_LATEST_OF_EVENT = """
SELECT user_id, thread_id, created_at, record FROM answer_explanations
 WHERE correlation_id = %(correlation_id)s AND (%(user)s::text IS NULL OR user_id = %(user)s)
 ORDER BY created_at DESC LIMIT 1
"""


@dataclass(frozen=True)
class StoredRecord:
    """An explanation's row: whose answer, in which thread, when, and the record as JSON."""

    user_id: str
    thread_id: str
    created_at: datetime
    record: dict[str, Any]


async def latest_of_event(
    connection: AsyncConnection[Any], correlation_id: str, user_id: str | None
) -> StoredRecord | None:
    """The newest record of the event ``correlation_id`` (of ``user_id``, when given)."""
    params = {"correlation_id": correlation_id, "user": user_id}
    async with connection.cursor(row_factory=class_row(StoredRecord)) as cursor:
        await cursor.execute(_LATEST_OF_EVENT, params)
        return await cursor.fetchone()
