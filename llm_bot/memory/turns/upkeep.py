"""Retention's, erasure's and the index's upkeep statements over the turns: what expires, what
a user's or a thread's erasure deletes, the backfill of recall's index, the re-embedding's
fill, and the summaries that go with the turns they cover."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from llm_bot.db.missing_vectors import MissingVectors, Slot
from llm_bot.db.rows import Rows
from llm_bot.memory.turns.recall import DEEP_FROM_SQL
from llm_bot.memory.turns.rows import Taken, thread_row

# What a deletion of turns returns, to name the turns it took (:class:`Taken`).
_TAKEN = " RETURNING user_id, thread_id, seq"

# Retention's (:mod:`llm_bot.lifecycle.retention`), each one batch, naming the turns it took:
# turns past the history's age.
_EXPIRED_TURNS = """
DELETE FROM conversation_turns t USING (
    SELECT user_id, thread_id, seq FROM conversation_turns WHERE created_at < %(cutoff)s
     LIMIT %(batch)s) old
 WHERE t.user_id = old.user_id AND t.thread_id = old.thread_id AND t.seq = old.seq
RETURNING t.user_id, t.thread_id, t.seq
"""

# The copies of a shared channel's newest turns (its window) expire with the turns.
_EXPIRED_CHANNEL_TURNS = """
DELETE FROM channel_turns t USING (
    SELECT thread_id, seq FROM channel_turns WHERE created_at < %(cutoff)s
     LIMIT %(batch)s) old
 WHERE t.thread_id = old.thread_id AND t.seq = old.seq
"""

# seq is gap-free per thread, so the newest N turns are those above last_seq - N. A shared
# channel's row and its turns are on different shards (the channel's, the authors'), which
# Citus joins only through a result it computes first: the threads over the cap. A session's
# summary (seq minus the last seq it covers) goes with that last turn.
_TURNS_BEYOND_CAP = """
WITH th AS (SELECT thread_id, last_seq - %(cap)s AS last_dropped FROM conversation_threads
             WHERE last_seq > %(cap)s)
DELETE FROM conversation_turns t USING (
    SELECT u.user_id, u.thread_id, u.seq FROM th
      JOIN conversation_turns u ON u.thread_id = th.thread_id
       AND u.seq BETWEEN -th.last_dropped AND th.last_dropped
     LIMIT %(batch)s) old
 WHERE t.user_id = old.user_id AND t.thread_id = old.thread_id AND t.seq = old.seq
RETURNING t.user_id, t.thread_id, t.seq
"""

# The copies in a shared channel's window of its turns beyond the cap, which go with the turns:
# the window keeps up to 2 * CONTEXT_PAIRS turns, more than a cap may keep, and shows every
# speaker what it holds. A channel's copies are on its row's shard (thread_id is the tenant).
_CHANNEL_TURNS_BEYOND_CAP = """
DELETE FROM channel_turns t USING (
    SELECT c.thread_id, c.seq FROM conversation_threads th
      JOIN channel_turns c ON c.thread_id = th.tenant
     WHERE th.tenant = th.thread_id AND c.seq <= th.last_seq - %(cap)s
     LIMIT %(batch)s) old
 WHERE t.thread_id = old.thread_id AND t.seq = old.seq
"""

# A thread row whose turns are all gone; a new message starts it again. Every turn of a thread
# idle since before the cutoff went with the expired turns above, so the checks only keep a row
# a pair is being written to: a DM's turns are its user's, a shared channel's newest are in its
# window's copy. A pair written since the batch was picked moved the row's time: checked again.
_EMPTY_THREADS = """
DELETE FROM conversation_threads th USING (
    SELECT tenant, thread_id FROM conversation_threads c
     WHERE c.last_turn_at < %(cutoff)s
       AND NOT EXISTS (SELECT 1 FROM conversation_turns u
                        WHERE u.user_id = c.tenant AND u.thread_id = c.thread_id)
       AND NOT EXISTS (SELECT 1 FROM channel_turns w WHERE w.thread_id = c.tenant)
     LIMIT %(batch)s) old
 WHERE th.tenant = old.tenant AND th.thread_id = old.thread_id
   AND th.last_turn_at < %(cutoff)s
"""


async def delete_expired_turns(
    connection: AsyncConnection[Any], cutoff: datetime, batch: int
) -> Taken:
    """Up to ``batch`` turns written before ``cutoff``, and which they were."""
    return await _taking(connection, _EXPIRED_TURNS, {"cutoff": cutoff, "batch": batch})


async def delete_expired_channel_turns(
    connection: AsyncConnection[Any], cutoff: datetime, batch: int
) -> int:
    """Up to ``batch`` copies in shared channels' windows written before ``cutoff``."""
    params = {"cutoff": cutoff, "batch": batch}
    return (await connection.execute(_EXPIRED_CHANNEL_TURNS, params)).rowcount


async def delete_turns_beyond_cap(connection: AsyncConnection[Any], cap: int, batch: int) -> Taken:
    """Up to ``batch`` turns older than their thread's newest ``cap``, and which they were."""
    return await _taking(connection, _TURNS_BEYOND_CAP, {"cap": cap, "batch": batch})


async def delete_channel_turns_beyond_cap(
    connection: AsyncConnection[Any], cap: int, batch: int
) -> int:
    """Up to ``batch`` copies in shared channels' windows of turns older than their thread's
    newest ``cap``."""
    params = {"cap": cap, "batch": batch}
    return (await connection.execute(_CHANNEL_TURNS_BEYOND_CAP, params)).rowcount


async def delete_empty_threads(
    connection: AsyncConnection[Any], cutoff: datetime, batch: int
) -> int:
    """Up to ``batch`` thread rows idle since before ``cutoff`` whose turns are all gone."""
    params = {"cutoff": cutoff, "batch": batch}
    return (await connection.execute(_EMPTY_THREADS, params)).rowcount


# The backfill of recall's index (:mod:`llm_bot.lifecycle.turn_backfill`): the users with
# unmarked turns (read from the partial index on them) who are deep, each counted no further
# than the depth.
_DEEP_USERS_UNMARKED = f"""
WITH deep_from AS ({DEEP_FROM_SQL})
SELECT u.user_id FROM (SELECT DISTINCT user_id FROM conversation_turns WHERE NOT indexed) u
 WHERE (SELECT count(*) FROM (
            SELECT FROM conversation_turns t WHERE t.user_id = u.user_id
             LIMIT (SELECT turns FROM deep_from)) mine) >= (SELECT turns FROM deep_from)
 ORDER BY u.user_id
"""

# One user's statement, so Citus runs it on that user's shard alone (the row lock is only
# possible there); the batch is read once (materialized), else a plan that reads it again per
# row locks, and marks, a further batch each time.
_MARK_INDEXED = """
WITH b AS MATERIALIZED (
    SELECT thread_id, seq FROM conversation_turns
     WHERE user_id = %(user)s AND NOT indexed
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
UPDATE conversation_turns t SET indexed = true FROM b
 WHERE t.user_id = %(user)s AND t.thread_id = b.thread_id AND t.seq = b.seq
"""


async def deep_users_unmarked(
    connection: AsyncConnection[Any], pool: int, deep_from: int | None
) -> list[str]:
    """The deep users with turns recall's index does not hold yet, ``pool`` recall's candidate
    pool; ``deep_from`` replaces the depth computed from the table's size (a test's few
    turns)."""
    params = {"deep_from": deep_from, "pool": pool}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_DEEP_USERS_UNMARKED, params)
        return [str(user) for (user,) in await cursor.fetchall()]


async def mark_indexed(connection: AsyncConnection[Any], user_id: str, batch: int) -> int:
    """Up to ``batch`` of ``user_id``'s unmarked turns marked for the index; how many."""
    cursor = await connection.execute(_MARK_INDEXED, {"user": user_id, "batch": batch})
    return max(cursor.rowcount, 0)


# The re-embedding's (:mod:`llm_bot.lifecycle.vector_slots`) over the turns without a vector in
# the slot ``{c}``: their count, a page of them in key order after a key (user, thread, seq),
# and the write of one's vector (a turn never changes).
_MISSING_VECTORS = (
    "SELECT count(*) FROM conversation_turns WHERE {c} IS NULL",
    "SELECT user_id, thread_id, seq, content FROM conversation_turns"
    " WHERE {c} IS NULL AND (user_id, thread_id, seq) > (%s, %s, %s)"
    " ORDER BY user_id, thread_id, seq LIMIT %s",
    "UPDATE conversation_turns SET {c} = %s::vector"
    " WHERE user_id = %s AND thread_id = %s AND seq = %s AND {c} IS NULL",
)


def missing_vectors(slot: Slot) -> MissingVectors:
    """The turns without a vector in ``slot``, keyed (user, thread, seq)."""
    return MissingVectors.of("history", ("", "", -1), _MISSING_VECTORS, slot)


# The session summaries, in any speaker's rows, whose window covered one of the taken turns
# (a summary's seq is minus the last seq it covers, its pair_index the seq before the first):
# a shared window's summary holds every speaker's words, so it goes when any of them goes. The
# turns are a result of their own (materialized), so Citus joins every shard's summaries with
# it, through the summaries' index by thread (migration 0023).
_SUMMARIES_OVER = """
WITH taken AS MATERIALIZED (
    SELECT DISTINCT thread_id, seq FROM unnest(%(threads)s::text[], %(seqs)s::bigint[])
        AS taken(thread_id, seq)),
covering AS MATERIALIZED (
    SELECT DISTINCT s.user_id, s.thread_id, s.seq FROM taken
      JOIN conversation_turns s ON s.thread_id = taken.thread_id AND s.role = 'summary'
       AND s.seq <= -taken.seq AND s.pair_index < taken.seq)
DELETE FROM conversation_turns t USING covering
 WHERE t.user_id = covering.user_id AND t.thread_id = covering.thread_id
   AND t.seq = covering.seq
"""


# Erasure's and export's rows (:mod:`llm_bot.lifecycle.erasure`): a user's turns, their copies in
# shared channels' windows and the rows of their DM threads (a shared channel's row is the
# room's, and its id may read as a user's id, so it is left out by that); a thread's turns,
# every speaker's, its window's copies and its row.
def turns_of_user(user_id: str) -> Rows:
    where = "FROM conversation_turns WHERE user_id = %(user)s"
    return Rows("conversation_turns", where, {"user": user_id})


def channel_turns_of_user(user_id: str) -> Rows:
    return Rows("channel_turns", "FROM channel_turns WHERE user_id = %(user)s", {"user": user_id})


def threads_of_user(user_id: str) -> Rows:
    where = "FROM conversation_threads WHERE tenant = %(user)s AND thread_id <> tenant"
    return Rows("conversation_threads", where, {"user": user_id})


def turns_of_thread(thread_id: str) -> Rows:
    where = "FROM conversation_turns WHERE thread_id = %(thread)s"
    return Rows("conversation_turns", where, {"thread": thread_id})


def channel_turns_of_thread(thread_id: str) -> Rows:
    where = "FROM channel_turns WHERE thread_id = %(thread)s"
    return Rows("channel_turns", where, {"thread": thread_id})


def row_of_thread(thread_id: str) -> Rows:
    where = "FROM conversation_threads WHERE tenant = %(tenant)s AND thread_id = %(thread_id)s"
    return Rows("conversation_threads", where, thread_row(thread_id))


async def delete_turns(connection: AsyncConnection[Any], rows: Rows) -> Taken:
    """``rows`` of the turns (:func:`turns_of_user`, :func:`turns_of_thread`) deleted, and
    which they were."""
    return await _taking(connection, f"DELETE {rows.where}{_TAKEN}", rows.params)


async def _taking(connection: AsyncConnection[Any], statement: str, params: Any) -> Taken:
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(statement, params)
        return Taken.of(await cursor.fetchall())


async def delete_summaries_over(connection: AsyncConnection[Any], taken: Taken) -> int:
    """The summaries, in any speaker's rows, whose window covered one of ``taken``; rows deleted."""
    cursor = await connection.execute(_SUMMARIES_OVER, taken.params)
    return cursor.rowcount
