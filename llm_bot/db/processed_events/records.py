"""The processed-events ledger's rows as the operator and the data's lifecycle read them: a
user's newest records (the console), an event's output as published (its explanation), and the
rows retention expires and erasure deletes. The claim, the output's store and the published
marks, on every event's path, are the package's own (:mod:`llm_bot.db.processed_events`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row, tuple_row

from llm_bot.db.processed_events import AnyConnection, key_params
from llm_bot.db.rows import Rows
from llm_bot.events.inbound import EventKey

# Retention's (:mod:`llm_bot.lifecycle.retention`): published (or abandoned) records, once a
# redelivery can no longer come after Pub/Sub's retention.
_EVENT_EXPIRED = """claimed_at < %(cutoff)s
   AND (published AND published_at < %(cutoff)s
        OR NOT published AND lease_until < %(lease_cutoff)s)"""
_EXPIRED_EVENTS = f"""
DELETE FROM processed_events p USING (
    SELECT user_id, correlation_id, step_key FROM processed_events WHERE {_EVENT_EXPIRED}
     LIMIT %(batch)s) old
 WHERE p.user_id = old.user_id AND p.correlation_id = old.correlation_id
   AND p.step_key = old.step_key AND {_EVENT_EXPIRED}
"""  # noqa: S608 (constants only)


async def delete_expired(
    connection: AnyConnection, cutoff: datetime, lease_cutoff: datetime, batch: int
) -> int:
    """Up to ``batch`` records published before ``cutoff``, or abandoned (their lease ran out
    before ``lease_cutoff``); rows deleted."""
    params = {"cutoff": cutoff, "lease_cutoff": lease_cutoff, "batch": batch}
    return (await connection.execute(_EXPIRED_EVENTS, params)).rowcount


# Erasure's and export's rows (:mod:`llm_bot.lifecycle.erasure`): a user's records, a thread's.
_ROWS_OF_USER = "FROM processed_events WHERE user_id = %(user)s"


def rows_of_user(user_id: str) -> Rows:
    return Rows("processed_events", _ROWS_OF_USER, {"user": user_id})


def rows_of_thread(thread_id: str) -> Rows:
    where = "FROM processed_events WHERE thread_id = %(thread)s"
    return Rows("processed_events", where, {"thread": thread_id})


# The user's newest events, as the operator console lists them.
_RECENT_OF_USER = (
    "SELECT correlation_id, step_key, thread_id, outcome, published, claimed_at, stored_at"
    f" {_ROWS_OF_USER} ORDER BY claimed_at DESC LIMIT %(limit)s"
)


@dataclass(frozen=True)
class EventRecord:
    """An event's record as an operator sees it: its key, thread, how it ended (None while in
    progress) and when it was claimed and stored."""

    correlation_id: str
    step_key: str
    thread_id: str
    outcome: str | None
    published: bool
    claimed_at: datetime
    stored_at: datetime | None


async def recent_events_of_user(
    connection: AnyConnection, user_id: str, limit: int
) -> list[EventRecord]:
    """``user_id``'s newest ``limit`` event records, newest first."""
    async with connection.cursor(row_factory=class_row(EventRecord)) as cursor:
        await cursor.execute(_RECENT_OF_USER, {"user": user_id, "limit": limit})
        return await cursor.fetchall()


# An event's output as published, for its explanation (:mod:`llm_bot.explanation.reader`): the
# words asked and the answer given are read from it, not copied.
_OUTPUT_OF_EVENT = """
SELECT output_data FROM processed_events
 WHERE user_id = %(user_id)s AND correlation_id = %(correlation_id)s AND step_key = %(step)s
"""


async def output_of_event(connection: AnyConnection, key: EventKey) -> bytes | None:
    """The event's output as published; None when it is gone (or was never stored)."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_OUTPUT_OF_EVENT, key_params(key))
        row = await cursor.fetchone()
    return None if row is None or row[0] is None else bytes(row[0])
