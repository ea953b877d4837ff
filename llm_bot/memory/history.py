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
    indexed: bool = False  # both turns enter recall's index (llm_bot.db.turn_index): a deep user's


# One statement: the thread's row is created on its first pair, else locked and moved on by
# two seqs (ON CONFLICT updates the newest version of the row, whatever the statement's
# snapshot), and the pair takes the two seqs it made room for; a thread silent for longer than
# ``idle`` starts a new session. A pair already written for the event (a batch rerun after a
# commit whose acknowledgement was lost) moves nothing. A concurrent write of the same event
# cannot get this far: its transaction stored the event's output first, under the claim's
# token (:mod:`llm_bot.db.processed_events`), and (source_event, role) is unique besides.
_APPEND_PAIR = """
WITH thread AS (
    INSERT INTO conversation_threads AS th (thread_id, last_seq, session_id, last_turn_at)
    SELECT %(thread_id)s, 2, 1, %(at)s
     WHERE NOT EXISTS (SELECT 1 FROM conversation_turns WHERE source_event = %(source_event)s)
    ON CONFLICT (thread_id) DO UPDATE
       SET last_seq = th.last_seq + 2,
           session_id = th.session_id + CASE
               WHEN th.last_turn_at IS NULL OR EXCLUDED.last_turn_at - th.last_turn_at > %(idle)s
               THEN 1 ELSE 0 END,
           last_turn_at = EXCLUDED.last_turn_at
    RETURNING th.last_seq, th.session_id
)
INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index, role, content,
                                created_at, source_event, embedding, visibility, indexed)
SELECT %(thread_id)s, thread.last_seq - 2 + t.step, %(user_id)s, thread.session_id,
       thread.last_seq / 2, t.role, t.content, %(at)s, %(source_event)s, t.embedding,
       %(visibility)s, %(indexed)s
  FROM thread,
       (VALUES (1, 'user', %(user_text)s, %(user_vector)s::vector),
               (2, 'assistant', %(assistant_text)s, %(assistant_vector)s::vector)
       ) AS t (step, role, content, embedding)
"""


async def write_pair(connection: AsyncConnection[Any], pair: PairRows, idle: timedelta) -> None:
    """Append ``pair`` to its thread inside the caller's transaction, unless it is there.

    One statement, since every statement of a write is spent inside the group commit that
    other events wait on; its result is not read, so in the group commit's pipeline it goes
    out with the transaction's commit."""
    await connection.execute(
        _APPEND_PAIR,
        {
            "thread_id": pair.thread_id,
            "user_id": pair.user_id,
            "at": pair.at,
            "idle": idle,
            "source_event": pair.source_event,
            "user_text": pair.user_text,
            "assistant_text": pair.assistant_text,
            "user_vector": vector_param(pair.user_vector),
            "assistant_vector": vector_param(pair.assistant_vector),
            "visibility": pair.visibility,
            "indexed": pair.indexed,
        },
    )


# The newest turns of the thread's current session (newest first), unless it idled: a query a
# caller may also compose with others into one statement (context assembly does).
WINDOW_SQL = """
SELECT t.thread_id, t.seq, t.user_id, t.session_id, t.role, t.content, t.created_at
  FROM conversation_threads th JOIN conversation_turns t
    ON t.thread_id = th.thread_id AND t.session_id = th.session_id
 WHERE th.thread_id = %(thread_id)s AND th.last_turn_at >= %(since)s
 ORDER BY t.seq DESC LIMIT %(turns)s
"""


def window_params(thread_id: str, pairs: int, now: datetime, idle: timedelta) -> dict[str, Any]:
    """:data:`WINDOW_SQL`'s parameters for the last ``pairs`` pairs as of ``now``."""
    return {"thread_id": thread_id, "since": now - idle, "turns": pairs * 2}


def window_of(rows: list[dict[str, Any]]) -> list[Turn]:
    """:data:`WINDOW_SQL`'s rows as the window, oldest first."""
    return sorted((Turn(**row) for row in rows), key=lambda turn: turn.seq)


async def read_window(
    connection: AsyncConnection[Any], thread_id: str, pairs: int, now: datetime, idle: timedelta
) -> list[Turn]:
    """The window alone, in its own statement (context assembly reads it with the notes)."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(WINDOW_SQL, window_params(thread_id, pairs, now, idle))
        return window_of(await cursor.fetchall())
