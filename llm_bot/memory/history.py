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
class PairToWrite:
    """One turn: the prompt and the reply, with their embeddings (made before the transaction)."""

    thread_id: str
    user_id: str
    user_text: str
    assistant_text: str
    at: datetime
    source_event: str
    user_vector: list[float] | None = None
    assistant_vector: list[float] | None = None


async def write_pair(connection: AsyncConnection[Any], pair: PairToWrite, idle: timedelta) -> bool:
    """Append ``pair`` to its thread inside the caller's transaction; False if already there."""
    await connection.execute(
        "INSERT INTO conversation_threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING",
        (pair.thread_id,),
    )
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT last_seq, session_id, last_turn_at FROM conversation_threads"
            " WHERE thread_id = %s FOR UPDATE",
            (pair.thread_id,),
        )
        thread = await cursor.fetchone()
        await cursor.execute(
            "SELECT 1 FROM conversation_turns WHERE source_event = %s", (pair.source_event,)
        )
        if await cursor.fetchone() is not None:
            return False
    assert thread is not None
    session = thread["session_id"]
    if thread["last_turn_at"] is None or pair.at - thread["last_turn_at"] > idle:
        session += 1
    seq = thread["last_seq"]
    pair_index = seq // 2 + 1
    rows = [
        (seq + 1, "user", pair.user_text, pair.user_vector),
        (seq + 2, "assistant", pair.assistant_text, pair.assistant_vector),
    ]
    async with connection.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
            " role, content, created_at, source_event, embedding)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::vector)",
            [
                (
                    pair.thread_id,
                    number,
                    pair.user_id,
                    session,
                    pair_index,
                    role,
                    text,
                    pair.at,
                    pair.source_event,
                    None if vector is None else str(vector),
                )
                for number, role, text, vector in rows
            ],
        )
    await connection.execute(
        "UPDATE conversation_threads SET last_seq = %s, session_id = %s, last_turn_at = %s"
        " WHERE thread_id = %s",
        (seq + 2, session, pair.at, pair.thread_id),
    )
    return True


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
