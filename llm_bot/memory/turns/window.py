"""Thread history: user/assistant pairs in ``conversation_turns``, one write per turn.

``seq`` is strictly increasing and gap-free per thread, also when two workers write the same
thread at once: a writer locks the thread's row in ``conversation_threads`` for the length of
its transaction, so pairs of one thread are written one after the other. A thread silent for
longer than ``SESSION_IDLE_SECONDS`` starts a new session; the window shows only the current
session, older ones stay searchable by recall. Everything lives in Postgres, so any instance
continues any conversation; there is no in-process cache to go stale.

Each turn is its author's row (recall reads a user's turns from every thread). A shared
channel's window is read from ``channel_turns``, a copy of its newest turns kept with the
channel's row, so it is one read of the channel's rows rather than of every speaker's
(:mod:`llm_bot.memory.turns` says where those rows are). The statements are this module's:
answering's hot path runs them, and nothing else does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.queries import Query, Row, read
from llm_bot.db.vectors import vector_param
from llm_bot.events.identity import is_shared_thread
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.turns.rows import thread_row

# One statement for the caller: migration 0019's ``append_pair`` (it says why a function). It
# appends the pair under the thread's tenant (:func:`thread_row`)
# unless the event's pair is there already (a batch rerun after a commit whose
# acknowledgement was lost). A concurrent write of the same event cannot get this far: its
# transaction stored the event's output first, under the claim's token
# (:mod:`llm_bot.db.processed_events`), and (user_id, source_event, role) is unique besides.
_APPEND_PAIR = """
SELECT append_pair(%(tenant)s, %(thread_id)s, %(user_id)s, %(at)s, %(idle)s, %(source_event)s,
                   %(user_text)s, %(assistant_text)s, %(user_vector)s::vector,
                   %(assistant_vector)s::vector, %(visibility)s, %(indexed)s, %(window_turns)s)
"""

# The newest turns of the thread's current session (newest first), unless it idled, from the
# tenant's shard: a DM's from its user's turns, a shared channel's from its copy of its newest
# turns (channel_turns). Its columns are a :class:`Turn`'s, in order. A query context assembly
# also reads beside others in one statement (:func:`window_query`).
_WINDOW_SQL = """
SELECT t.thread_id, t.seq, t.user_id, t.session_id, t.role, t.content, t.created_at
  FROM conversation_threads th JOIN {table} t
    ON {same_rows} AND t.session_id = th.session_id
 WHERE th.tenant = %(tenant)s AND th.thread_id = %(thread_id)s AND th.last_turn_at >= %(since)s
 ORDER BY t.seq DESC LIMIT %(turns)s
"""
_DM_WINDOW_SQL = _WINDOW_SQL.format(
    table="conversation_turns",
    same_rows="t.user_id = th.tenant AND t.thread_id = th.thread_id",
)
_CHANNEL_WINDOW_SQL = _WINDOW_SQL.format(table="channel_turns", same_rows="t.thread_id = th.tenant")


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


async def write_pair(
    connection: AsyncConnection[Any], pair: PairRows, idle: timedelta, window_pairs: int
) -> None:
    """Append ``pair`` to its thread inside the caller's transaction, unless it is there; a
    shared channel keeps its newest ``window_pairs`` pairs for its window (:func:`window_query`).

    One statement, since every statement of a write is spent inside the group commit that
    other events wait on; its result is not read, so in the group commit's pipeline it goes
    out with the transaction's commit."""
    await connection.execute(
        _APPEND_PAIR,
        {
            **thread_row(pair.thread_id),
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
            "window_turns": window_pairs * 2,
        },
    )


def window_query(thread_id: str, pairs: int, now: datetime, idle: timedelta) -> Query[list[Turn]]:
    """The window of ``thread_id``'s last ``pairs`` pairs as of ``now``, a shared channel's or a
    DM's, as context assembly reads it beside the notes
    (:func:`llm_bot.memory.notes_store.read_notes_and_window`) or alone (:func:`read_window`)."""
    sql = _CHANNEL_WINDOW_SQL if is_shared_thread(thread_id) else _DM_WINDOW_SQL
    params = {**thread_row(thread_id), "since": now - idle, "turns": pairs * 2}
    return Query(sql, params, len(fields(Turn)), _window_of)


def _window_of(rows: list[Row]) -> list[Turn]:
    """The window's rows as the window, oldest first."""
    return sorted((Turn(*row) for row in rows), key=lambda turn: turn.seq)


async def read_window(
    connection: AsyncConnection[Any], thread_id: str, pairs: int, now: datetime, idle: timedelta
) -> list[Turn]:
    """The window alone, in its own statement (context assembly reads it with the notes)."""
    return await read(connection, window_query(thread_id, pairs, now, idle))
