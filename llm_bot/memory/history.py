"""Thread history: user/assistant pairs in ``conversation_turns``, one write per turn.

``seq`` is strictly increasing and gap-free per thread, also when two workers write the same
thread at once: a writer locks the thread's row in ``conversation_threads`` for the length of
its transaction, so pairs of one thread are written one after the other. A thread silent for
longer than ``SESSION_IDLE_SECONDS`` starts a new session; the window shows only the current
session, older ones stay searchable by recall. Everything lives in Postgres, so any instance
continues any conversation; there is no in-process cache to go stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from llm_bot.db.vectors import vector_param
from llm_bot.memory.run_writes import Visibility


@dataclass(frozen=True)
class Turn:
    thread_id: str
    seq: int
    user_id: str
    session_id: int
    role: str
    content: str
    created_at: datetime


@dataclass(frozen=True)
class PairRows:
    """A pair as its two rows of ``conversation_turns``: the user's turn and the reply, with
    their embeddings (made before the transaction)."""

    thread_id: str
    user_id: str
    user_text: str
    assistant_text: str
    at: datetime
    source_event: str
    user_vector: list[float] | None = None
    assistant_vector: list[float] | None = None
    visibility: Visibility = "public"  # a DM's turns are recalled only in DMs


# Creates the thread on its first pair and locks its row either way, for the transaction.
_LOCK_THREAD = """
INSERT INTO conversation_threads AS th (thread_id) VALUES (%(thread_id)s)
ON CONFLICT (thread_id) DO UPDATE SET thread_id = th.thread_id
RETURNING th.last_seq, th.session_id, th.last_turn_at
"""

# A separate statement, so its snapshot is taken after the lock: a pair that the previous
# holder of the lock wrote for the same event is seen, and this one is not written twice.
_APPEND_PAIR = """
WITH turns AS (
    INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index, role,
                                    content, created_at, source_event, embedding, visibility)
    SELECT %(thread_id)s, t.seq, %(user_id)s, %(session_id)s, %(pair_index)s, t.role,
           t.content, %(at)s, %(source_event)s, t.embedding, %(visibility)s
      FROM (VALUES (%(user_seq)s::bigint, 'user', %(user_text)s, %(user_vector)s::vector),
                   (%(user_seq)s + 1, 'assistant', %(assistant_text)s, %(assistant_vector)s::vector)
           ) AS t (seq, role, content, embedding)
     WHERE NOT EXISTS (SELECT 1 FROM conversation_turns WHERE source_event = %(source_event)s)
    RETURNING 1
)
UPDATE conversation_threads
   SET last_seq = %(user_seq)s + 1, session_id = %(session_id)s, last_turn_at = %(at)s
 WHERE thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM turns)
"""


async def write_pair(connection: AsyncConnection[Any], pair: PairRows, idle: timedelta) -> None:
    """Append ``pair`` to its thread inside the caller's transaction, unless it is there.

    Two statements (lock the thread, then append if new), since every round trip of a write
    is spent inside the group commit that other events wait on; the append's result is not
    read, so in the group commit's pipeline it goes out with the event's next statement."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(_LOCK_THREAD, {"thread_id": pair.thread_id})
        thread = await cursor.fetchone()
    if thread is None:
        raise RuntimeError(f"locking thread {pair.thread_id!r} returned no row")
    session = thread["session_id"]
    if thread["last_turn_at"] is None or pair.at - thread["last_turn_at"] > idle:
        session += 1
    seq = thread["last_seq"]
    await connection.execute(
        _APPEND_PAIR,
        {
            "thread_id": pair.thread_id,
            "user_id": pair.user_id,
            "session_id": session,
            "pair_index": seq // 2 + 1,
            "at": pair.at,
            "source_event": pair.source_event,
            "user_seq": seq + 1,
            "user_text": pair.user_text,
            "assistant_text": pair.assistant_text,
            "user_vector": vector_param(pair.user_vector),
            "assistant_vector": vector_param(pair.assistant_vector),
            "visibility": pair.visibility,
        },
    )


async def read_window(
    connection: AsyncConnection[Any], thread_id: str, pairs: int, now: datetime, idle: timedelta
) -> list[Turn]:
    """The last ``pairs`` pairs of the thread's current session, oldest first; none after idling."""
    if pairs == 0:
        return []
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT t.thread_id, t.seq, t.user_id, t.session_id, t.role, t.content, t.created_at"
            " FROM conversation_threads th JOIN conversation_turns t"
            "   ON t.thread_id = th.thread_id AND t.session_id = th.session_id"
            " WHERE th.thread_id = %s AND th.last_turn_at >= %s"
            " ORDER BY t.seq DESC LIMIT %s",
            (thread_id, now - idle, pairs * 2),
        )
        rows = await cursor.fetchall()
    return [Turn(**row) for row in reversed(rows)]
