"""Retention: what ``llm-bot maintain`` deletes, and how without disturbing the workers.

Each rule is a setting whose ``0`` keeps data forever. Enforced by an operator job (a Cloud Run
job on a schedule, ``deploy/``), not by the workers: one small periodic task is cheaper than a
timer in every instance, it is observable as one execution with one report, and an event's
path never shares its CPU or connections with a sweep.

Every rule deletes in batches of ``RETENTION_BATCH_ROWS``, each its own short transaction, so
no lock is held for long. Several runs at once (a retried job beside a scheduled one) neither
fail nor double-count: rows picked by age are locked ``SKIP LOCKED`` (two runs take disjoint
batches), and the per-user memory cap is recomputed from each batch's snapshot (a row that
another run deleted first is skipped by ``DELETE``). Times compare with ``now``, given by the
caller, so tests move the clock; a row under a live claim is never touched whatever ``now``
says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from llm_bot.settings import Settings

PROGRESS_EVERY_S = 2.0

# Published (or abandoned) records: a redelivery can no longer come after Pub/Sub's retention.
_PROCESSED_EVENTS = """
DELETE FROM processed_events p USING (
    SELECT user_id, correlation_id, step_key FROM processed_events
     WHERE claimed_at < %(cutoff)s
       AND (published AND published_at < %(cutoff)s
            OR NOT published AND lease_until < least(%(cutoff)s, clock_timestamp()))
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED) old
 WHERE p.user_id = old.user_id AND p.correlation_id = old.correlation_id
   AND p.step_key = old.step_key
"""

# Tool calls go with the event records they belong to: a call is kept as long as its event's
# record may still meet a redelivery (the record is what makes the redelivery replay it), and
# goes once the record has gone. A call can only be made under its event's claim, so every
# call of a run had a record; "started before the cutoff" reads by index and leaves alone the
# calls of an event whose record is being claimed right now.
_TOOL_CALLS = """
DELETE FROM tool_calls t USING (
    SELECT user_id, correlation_id, step_key, call_index FROM tool_calls c
     WHERE c.started_at < %(cutoff)s
       AND NOT EXISTS (SELECT 1 FROM processed_events p
                        WHERE p.user_id = c.user_id AND p.correlation_id = c.correlation_id
                          AND p.step_key = c.step_key)
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED) old
 WHERE t.user_id = old.user_id AND t.correlation_id = old.correlation_id
   AND t.step_key = old.step_key AND t.call_index = old.call_index
"""

_OLD_TURNS = """
DELETE FROM conversation_turns t USING (
    SELECT user_id, thread_id, seq FROM conversation_turns WHERE created_at < %(cutoff)s
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED) old
 WHERE t.user_id = old.user_id AND t.thread_id = old.thread_id AND t.seq = old.seq
"""

# The copies of a shared channel's newest turns (its window) expire with the turns.
_OLD_CHANNEL_TURNS = """
DELETE FROM channel_turns t USING (
    SELECT thread_id, seq FROM channel_turns WHERE created_at < %(cutoff)s
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED) old
 WHERE t.thread_id = old.thread_id AND t.seq = old.seq
"""

# seq is gap-free per thread, so the newest N turns are those above last_seq - N.
_TURNS_BEYOND_CAP = """
DELETE FROM conversation_turns t USING (
    SELECT u.user_id, u.thread_id, u.seq FROM conversation_threads th
      JOIN conversation_turns u ON u.thread_id = th.thread_id AND u.seq <= th.last_seq - %(cap)s
     LIMIT %(batch)s FOR UPDATE OF u SKIP LOCKED) old
 WHERE t.user_id = old.user_id AND t.thread_id = old.thread_id AND t.seq = old.seq
"""

# A thread row whose turns are all gone; a new message starts it again. Every turn of a thread
# idle since before the cutoff went with the expired turns above, so the checks only keep a row
# a pair is being written to: a DM's turns are its user's, a shared channel's newest are in its
# window's copy.
_EMPTY_THREADS = """
DELETE FROM conversation_threads th USING (
    SELECT tenant, thread_id FROM conversation_threads c
     WHERE c.last_turn_at < %(cutoff)s
       AND NOT EXISTS (SELECT 1 FROM conversation_turns u
                        WHERE u.user_id = c.tenant AND u.thread_id = c.thread_id)
       AND NOT EXISTS (SELECT 1 FROM channel_turns w WHERE w.thread_id = c.tenant)
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED) old
 WHERE th.tenant = old.tenant AND th.thread_id = old.thread_id
"""

_USERS_OVER_CAP = """
SELECT user_id FROM memories GROUP BY user_id HAVING count(*) > %(cap)s
"""

# The most recently created beyond the cap. The cap is also enforced at write time (a new
# memory beyond it is refused), so rows beyond it come from a lowered cap or concurrent writes;
# the user's first facts stand, as at write time, and a flood of new rows (a steered model) is
# what goes, never the older genuine ones.
_MEMORIES_BEYOND_CAP = """
DELETE FROM memories m USING (
    SELECT key FROM memories WHERE user_id = %(user)s
     ORDER BY created_at, key OFFSET %(cap)s LIMIT %(batch)s) old
 WHERE m.user_id = %(user)s AND m.key = old.key
"""


# Earlier texts of facts: gone with their memory (the cap above), or past the history's age.
_MEMORY_VERSIONS = """
DELETE FROM memory_versions mv USING (
    SELECT user_id, key, version FROM memory_versions v
     WHERE v.valid_to < %(cutoff)s
        OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.user_id = v.user_id AND m.key = v.key)
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED) old
 WHERE mv.user_id = old.user_id AND mv.key = old.key AND mv.version = old.version
"""


@dataclass(frozen=True)
class RetentionPolicy:
    """Days and counts kept; 0 keeps forever."""

    processed_events_days: int
    history_days: int
    history_turns_per_thread: int
    memories_per_user: int
    batch_rows: int

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        return cls(
            processed_events_days=settings.retention_processed_events_days,
            history_days=settings.retention_history_days,
            history_turns_per_thread=settings.retention_history_turns_per_thread,
            memories_per_user=settings.retention_memories_per_user,
            batch_rows=settings.retention_batch_rows,
        )


Progress = Callable[[str], None]


async def maintain(
    connection: AsyncConnection[Any], policy: RetentionPolicy, now: datetime, progress: Progress
) -> dict[str, int]:
    """Apply every rule on an autocommit ``connection``; rows deleted per rule."""
    deleted: dict[str, int] = {}
    batch = {"batch": policy.batch_rows}
    if policy.processed_events_days:
        cutoff = now - timedelta(days=policy.processed_events_days)
        deleted["processed_events"] = await _sweep(
            connection, "processed_events", _PROCESSED_EVENTS, {**batch, "cutoff": cutoff}, progress
        )
        deleted["tool_calls"] = await _sweep(
            connection, "tool_calls", _TOOL_CALLS, {**batch, "cutoff": cutoff}, progress
        )
    if policy.history_days:
        cutoff = now - timedelta(days=policy.history_days)
        params = {**batch, "cutoff": cutoff}
        deleted["turns_expired"] = await _sweep(
            connection, "turns_expired", _OLD_TURNS, params, progress
        )
        deleted["channel_turns_expired"] = await _sweep(
            connection, "channel_turns_expired", _OLD_CHANNEL_TURNS, params, progress
        )
        deleted["threads_empty"] = await _sweep(
            connection, "threads_empty", _EMPTY_THREADS, params, progress
        )
    if policy.history_turns_per_thread:
        params = {**batch, "cap": policy.history_turns_per_thread}
        deleted["turns_beyond_cap"] = await _sweep(
            connection, "turns_beyond_cap", _TURNS_BEYOND_CAP, params, progress
        )
    if policy.memories_per_user:
        deleted["memories_beyond_cap"] = await _cap_memories(connection, policy, progress)
    if policy.history_days or policy.memories_per_user:
        days = policy.history_days
        cutoff = now - timedelta(days=days) if days else datetime.min.replace(tzinfo=now.tzinfo)
        deleted["memory_versions"] = await _sweep(
            connection, "memory_versions", _MEMORY_VERSIONS, {**batch, "cutoff": cutoff}, progress
        )
    return deleted


async def _cap_memories(
    connection: AsyncConnection[Any], policy: RetentionPolicy, progress: Progress
) -> int:
    params: dict[str, Any] = {"batch": policy.batch_rows, "cap": policy.memories_per_user}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_USERS_OVER_CAP, params)
        users = [user for (user,) in await cursor.fetchall()]
    total = 0
    for user in users:
        total += await _sweep(
            connection, "memories_beyond_cap", _MEMORIES_BEYOND_CAP, {**params, "user": user}
        )
    progress(f"memories_beyond_cap: {total} deleted")
    return total


async def _sweep(
    connection: AsyncConnection[Any],
    rule: str,
    statement: str,
    params: dict[str, Any],
    progress: Progress | None = None,
) -> int:
    """Run ``statement`` (one batch, one transaction) until a batch comes back short."""
    total, last_report = 0, time.monotonic()
    while True:
        cursor = await connection.execute(statement, params)
        total += cursor.rowcount
        if progress and time.monotonic() - last_report >= PROGRESS_EVERY_S:
            progress(f"{rule}: {total} deleted so far")
            last_report = time.monotonic()
        if cursor.rowcount < params["batch"]:
            break
    if progress:
        progress(f"{rule}: {total} deleted")
    return total
