"""Erasure with a receipt: every row that holds one user's (or one thread's) data, in every
table we own, deleted in one transaction, and how many rows went from each table.

A user's rows are found by what names them: ``user_id`` (memories and their versions, turns
and their copies in shared channels' windows, notes, processed-event records, tool calls,
answers' explanations, the operator console's record of who viewed them) and the rows of the
user's direct-message threads (:func:`llm_bot.memory.turns.upkeep.threads_of_user`). A shared
thread's row is the room's, so it stays, with the other speakers' turns.

Whatever was derived from the deleted turns goes in the same transaction, in whichever user's
rows it lies (:mod:`llm_bot.lifecycle.provenance`): a shared window's summary in another
speaker's rows, facts that cite a turn.

A table added later must be added to :data:`USER_ROWS`, with its rows named by the table's owner
(tests/unit/test_table_owners.py): the erasure test scans every column of
every table in the schema, from the catalog, and fails when a user's data survives anywhere.
Events of the user still in flight while this runs may write again; erase after the user's
traffic has stopped (or run it again: it is idempotent).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db import console_views
from llm_bot.db.processed_events import records as event_records
from llm_bot.db.rows import Rows, delete
from llm_bot.explanation import table as explanations
from llm_bot.lifecycle.provenance import forget_derived
from llm_bot.memory import memories, notes_store, versions
from llm_bot.memory.turns import upkeep as turns
from llm_bot.platform_tools import ledger

# Each table's rows of a subject (a user, a thread), as the table's owner names them.
RowsOf = Callable[[str], Rows]

# Every turn and event record names its user, so ``user_id`` finds them through its key. Turns
# go before what is derived from them: a consolidation job holds its source turns locked until
# its memories are written (:func:`llm_bot.memory.turns.consolidation.lock_sources`), so an
# erasure under way either waits for it and then deletes those memories too, or leaves it
# nothing to derive from.
USER_ROWS: tuple[RowsOf, ...] = (
    turns.threads_of_user,
    turns.turns_of_user,
    turns.channel_turns_of_user,
    versions.rows_of_user,
    memories.rows_of_user,
    notes_store.rows_of_user,
    event_records.rows_of_user,
    ledger.rows_of_user,
    console_views.rows_of_user,
    explanations.rows_of_user,
)

# A thread's tool calls are found through its event records, so they go before the records.
THREAD_ROWS: tuple[RowsOf, ...] = (
    turns.turns_of_thread,
    turns.channel_turns_of_thread,
    turns.row_of_thread,
    memories.derived_of_thread,
    versions.derived_of_thread,
    ledger.rows_of_thread,
    explanations.rows_of_thread,
    event_records.rows_of_thread,
)


@dataclass(frozen=True)
class Receipt:
    """What an erasure deleted: rows per table."""

    subject: str
    deleted: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


async def forget_user(connection: AsyncConnection[Any], user_id: str) -> Receipt:
    """Delete everything held about ``user_id``, all or nothing."""
    return Receipt(f"user {user_id}", await _delete_all(connection, USER_ROWS, user_id))


async def forget_thread(connection: AsyncConnection[Any], thread_id: str) -> Receipt:
    """Delete one conversation: its turns (every speaker's, its sessions' summaries with them),
    its row, the memories consolidation derived from it, its event records and their tool
    calls. Other memories and notes are the users' own and stay; forget those per memory or
    per user."""
    return Receipt(f"thread {thread_id}", await _delete_all(connection, THREAD_ROWS, thread_id))


async def _delete_all(
    connection: AsyncConnection[Any], rows_of: tuple[RowsOf, ...], subject: str
) -> dict[str, int]:
    """Each table's rows of ``subject`` deleted, in order, in one transaction; the turns'
    deletion names what it took, and what was derived from those turns goes right after it."""
    deleted: Counter[str] = Counter()
    async with connection.transaction():
        for rows in (each(subject) for each in rows_of):
            if rows.table == "conversation_turns":
                taken = await turns.delete_turns(connection, rows)
                deleted[rows.table] += len(taken)
                deleted.update(await forget_derived(connection, taken))
            else:
                deleted[rows.table] += await delete(connection, rows)
    return dict(deleted)
