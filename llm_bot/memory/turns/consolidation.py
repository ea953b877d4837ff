"""Consolidation's statements, run here for it (:mod:`llm_bot.consolidation`): its sweep reads
and marks closed windows, its job reads a window's turns, locks each speaker's sources and
writes the window's summary."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row

from llm_bot.db.vectors import vector_param
from llm_bot.events.identity import is_shared_thread
from llm_bot.memory.turns.rows import thread_row

# Consolidation's (:mod:`llm_bot.consolidation`). The sweep: threads whose turns after
# ``consolidated_seq`` ended a session (silent since ``idle_before``) or reached the turn cap,
# oldest silence first, a bounded batch read through the partial index on them (migration
# 0022). A job's window is ``(consolidated_seq, last_seq]``, at most ``cap`` turns.
_CLOSED_WINDOWS = """
SELECT thread_id, consolidated_seq, least(last_seq, consolidated_seq + %(cap)s)
  FROM conversation_threads
 WHERE consolidated_seq < last_seq
   AND (last_turn_at < %(idle_before)s OR last_seq - consolidated_seq >= %(cap)s)
 ORDER BY last_turn_at LIMIT %(batch)s
"""
# The window handed to a job: moved on only from where the sweep read it, so two sweeps that
# read the same row move it once.
_MARK_CONSOLIDATED = """
UPDATE conversation_threads SET consolidated_seq = %(to_seq)s
 WHERE tenant = %(tenant)s AND thread_id = %(thread_id)s AND consolidated_seq = %(from_seq)s
"""
# A job's turns, every speaker's (a DM's are its user's, read from that user's shard alone).
_WINDOW_TURNS = """
SELECT user_id, seq, role, content, created_at, visibility FROM conversation_turns
 WHERE {author} thread_id = %(thread_id)s AND seq > %(from_seq)s AND seq <= %(to_seq)s
 ORDER BY seq
"""
_DM_WINDOW_TURNS = _WINDOW_TURNS.format(author="user_id = %(tenant)s AND")  # thread_row's
_CHANNEL_WINDOW_TURNS = _WINDOW_TURNS.format(author="")
# The author's turns of the window that still exist, locked until the job's writes commit: an
# erasure deletes turns before the memories (:mod:`llm_bot.lifecycle.erasure`), so either it
# waits for the job and then deletes what the job wrote, or the job waits for it and finds
# nothing to derive from.
_LOCK_SOURCES = """
SELECT seq FROM conversation_turns
 WHERE user_id = %(user)s AND thread_id = %(thread_id)s AND seq > %(from_seq)s
   AND seq <= %(to_seq)s AND role <> 'summary'
 FOR SHARE
"""
# A session's summary as a recall key of the author's (migration 0022 says why a turn's row).
_INSERT_SUMMARY = """
INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index, role, content,
                                created_at, source_event, embedding, visibility, indexed)
VALUES (%(thread_id)s, -%(to_seq)s, %(user)s, 0, %(from_seq)s, 'summary', %(content)s, %(at)s,
        %(source)s, %(vector)s::vector, %(visibility)s, false)
ON CONFLICT DO NOTHING
"""


async def closed_windows(
    connection: AsyncConnection[Any], *, idle_before: datetime, cap: int, batch: int
) -> list[tuple[str, int, int]]:
    """Up to ``batch`` windows ``(thread, after, last]`` whose session closed."""
    params = {"idle_before": idle_before, "cap": cap, "batch": batch}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_CLOSED_WINDOWS, params)
        return [(str(t), int(after), int(last)) for t, after, last in await cursor.fetchall()]


async def mark_consolidated(
    connection: AsyncConnection[Any], thread_id: str, from_seq: int, to_seq: int
) -> None:
    """The thread's window handed to a job: moved on from where the sweep read it."""
    params = {**thread_row(thread_id), "from_seq": from_seq, "to_seq": to_seq}
    await connection.execute(_MARK_CONSOLIDATED, params)


async def window_turns(
    connection: AsyncConnection[Any], thread_id: str, from_seq: int, to_seq: int
) -> list[dict[str, Any]]:
    """The turns ``(from_seq, to_seq]`` of the thread, every speaker's, oldest first, as
    columns by name (``user_id, seq, role, content, created_at, visibility``); summaries too."""
    sql = _CHANNEL_WINDOW_TURNS if is_shared_thread(thread_id) else _DM_WINDOW_TURNS
    params = {**thread_row(thread_id), "from_seq": from_seq, "to_seq": to_seq}
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(sql, params)
        return await cursor.fetchall()


async def lock_sources(
    connection: AsyncConnection[Any], user_id: str, thread_id: str, from_seq: int, to_seq: int
) -> set[int]:
    """The seqs of ``user_id``'s turns of the window still there, locked until the caller's
    transaction ends (:data:`_LOCK_SOURCES`)."""
    params = {"user": user_id, "thread_id": thread_id, "from_seq": from_seq, "to_seq": to_seq}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_LOCK_SOURCES, params)
        return {int(seq) for (seq,) in await cursor.fetchall()}


@dataclass(frozen=True)
class Summary:
    """A window's summary as one speaker's recall key: the thread's turns ``(from_seq,
    to_seq]``, the job that wrote it (``source``), when (its newest turn's time) and where it
    may be shown."""

    thread_id: str
    from_seq: int
    to_seq: int
    user_id: str
    content: str
    at: datetime
    source: str
    vector: list[float] | None
    visibility: str


async def insert_summary(connection: AsyncConnection[Any], summary: Summary) -> bool:
    """``summary`` stored; False when its window already has one for that user."""
    params = {
        "thread_id": summary.thread_id,
        "from_seq": summary.from_seq,
        "to_seq": summary.to_seq,
        "user": summary.user_id,
        "content": summary.content,
        "at": summary.at,
        "source": summary.source,
        "vector": vector_param(summary.vector),
        "visibility": summary.visibility,
    }
    written = await connection.execute(_INSERT_SUMMARY, params)
    return written.rowcount == 1
