"""Erasure with a receipt: every row that holds one user's (or one thread's) data, in every
table we own, deleted in one transaction, and how many rows went from each table.

A user's rows are found by what names them: ``user_id`` (memories and their versions, turns
and their copies in shared channels' windows, notes, processed-event records, tool calls,
answers' explanations, the operator console's record of who viewed them) and the rows of the
user's direct-message threads (:data:`llm_bot.memory.turns.upkeep.THREADS_OF_USER`). A shared
thread's row is the room's, so it stays, with the other speakers' turns.

Whatever was derived from the deleted turns goes in the same transaction, in whichever user's
rows it lies (:mod:`llm_bot.lifecycle.provenance`): a shared window's summary in another
speaker's rows, facts that cite a turn.

A table added later must be added to :data:`USER_ROWS`, with its rows from the table's owner
(tests/unit/test_table_owners.py): the erasure test scans every column of
every table in the schema, from the catalog, and fails when a user's data survives anywhere.
Events of the user still in flight while this runs may write again; erase after the user's
traffic has stopped (or run it again: it is idempotent).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db import console_views, processed_events
from llm_bot.explanation import table as explanations
from llm_bot.lifecycle.provenance import forget_derived
from llm_bot.memory import memories, notes_store, versions
from llm_bot.memory.turns.rows import TAKEN, thread_row
from llm_bot.memory.turns.upkeep import (
    CHANNEL_TURNS_OF_THREAD,
    CHANNEL_TURNS_OF_USER,
    THREAD_ROW,
    THREADS_OF_USER,
    TURNS_OF_THREAD,
    TURNS_OF_USER,
)
from llm_bot.platform_tools import ledger

# (table, its rows: "FROM <table> WHERE <condition>", from the table's owner). Every turn and
# event record names its user, so ``user_id`` finds them through its key. Turns go before what
# is derived from them: a consolidation job holds its source turns locked until its memories
# are written (:func:`llm_bot.memory.turns.consolidation.lock_sources`), so an erasure under
# way either waits for it and then deletes those memories too, or leaves it nothing to derive
# from.
USER_ROWS: tuple[tuple[str, str], ...] = (
    ("conversation_threads", THREADS_OF_USER),
    ("conversation_turns", TURNS_OF_USER),
    ("channel_turns", CHANNEL_TURNS_OF_USER),
    ("memory_versions", versions.ROWS_OF_USER),
    ("memories", memories.ROWS_OF_USER),
    ("agent_notes", notes_store.ROWS_OF_USER),
    ("processed_events", processed_events.ROWS_OF_USER),
    ("tool_calls", ledger.ROWS_OF_USER),
    ("console_views", console_views.ROWS_OF_USER),
    ("answer_explanations", explanations.ROWS_OF_USER),
)

# A thread's tool calls are found through its event records, so they go before the records.
THREAD_ROWS: tuple[tuple[str, str], ...] = (
    ("conversation_turns", TURNS_OF_THREAD),
    ("channel_turns", CHANNEL_TURNS_OF_THREAD),
    ("conversation_threads", THREAD_ROW),
    ("memories", memories.DERIVED_OF_THREAD),
    ("memory_versions", versions.DERIVED_OF_THREAD),
    ("tool_calls", ledger.ROWS_OF_THREAD),
    ("answer_explanations", explanations.ROWS_OF_THREAD),
    ("processed_events", processed_events.ROWS_OF_THREAD),
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
    deleted = await _delete_all(connection, USER_ROWS, user_params(user_id))
    return Receipt(f"user {user_id}", deleted)


def user_params(user_id: str) -> dict[str, str]:
    """The parameters :data:`USER_ROWS`' conditions name."""
    return {"user": user_id}


async def forget_thread(connection: AsyncConnection[Any], thread_id: str) -> Receipt:
    """Delete one conversation: its turns (every speaker's, its sessions' summaries with them),
    its row, the memories consolidation derived from it, its event records and their tool
    calls. Other memories and notes are the users' own and stay; forget those per memory or
    per user."""
    params = {"thread": thread_id, **thread_row(thread_id)}
    return Receipt(f"thread {thread_id}", await _delete_all(connection, THREAD_ROWS, params))


async def _delete_all(
    connection: AsyncConnection[Any], rows: tuple[tuple[str, str], ...], params: dict[str, str]
) -> dict[str, int]:
    """Each of ``rows`` deleted, in order, in one transaction; the turns' deletion names what it
    took, and what was derived from those turns goes right after it."""
    deleted: Counter[str] = Counter()
    async with connection.transaction():
        for table, rows_of in rows:
            if table == "conversation_turns":
                cursor = await connection.execute(f"DELETE {rows_of}{TAKEN}", params)
                taken = [(user, thread, int(seq)) for user, thread, seq in await cursor.fetchall()]
                deleted[table] += cursor.rowcount
                deleted.update(await forget_derived(connection, taken))
            else:
                cursor = await connection.execute(f"DELETE {rows_of}", params)
                deleted[table] += cursor.rowcount
    return dict(deleted)
