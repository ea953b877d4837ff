"""Retention: what ``llm-bot maintain`` deletes, and how without disturbing the workers.

Each rule is a setting whose ``0`` keeps data forever. Enforced by an operator job (a Cloud Run
job on a schedule, ``deploy/``), not by the workers: one small periodic task is cheaper than a
timer in every instance, it is observable as one execution with one report, and an event's
path never shares its CPU or connections with a sweep.

Every rule deletes in batches of ``RETENTION_BATCH_ROWS``, each its own short transaction, so
no lock is held for long: a statement names a batch of due rows by their keys, the next
deletes those of them that are still due (the condition is checked again under each row's
lock). Both forms run on a Citus cluster as on one PostgreSQL: a lifecycle job may read every
shard, but Citus locks no rows (``FOR UPDATE``) across shards and deletes by a join only on
the tenant (docs/citus.md, "The shard key"). Several runs at once (a retried job beside a
scheduled one) neither fail nor double-count: a row both runs found is deleted by one, and
each goes on until it finds no due row. The per-user memory cap is recomputed from each
batch's snapshot. Times compare with ``now``, given by the caller, so tests move the clock; a
row under a live claim is never touched whatever ``now`` says: a lease is also compared with
this process's clock.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from llm_bot.clock import utc_now
from llm_bot.settings import Settings

PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class Rule:
    """Rows of ``table`` (as ``t``, beside the items of ``using``) that are ``due``, found by
    ``find`` a batch at a time and deleted by ``delete`` by their keys, each key column an
    array parameter named after it; ``tenant`` is the column Citus distributes ``table`` by."""

    table: str
    keys: tuple[tuple[str, str], ...]  # (column, type)
    tenant: str
    due: str
    using: str = ""  # more FROM items, each after a comma

    @property
    def find(self) -> str:
        columns = ", ".join(f"t.{column}" for column, _ in self.keys)
        where = f"WHERE {self.due} LIMIT %(batch)s"
        return f"SELECT {columns} FROM {self.table} t{self.using} {where}"  # noqa: S608 (constants)

    @property
    def delete(self) -> str:
        arrays = ", ".join(f"%({column})s::{kind}[]" for column, kind in self.keys)
        names = ", ".join(column for column, _ in self.keys)
        same = " AND ".join(f"t.{column} = k.{column}" for column, _ in self.keys)
        tenant = f"t.{self.tenant} = ANY(%({self.tenant})s::text[])"
        keys = f"unnest({arrays}) AS k({names}){self.using}"
        where = f"WHERE {tenant} AND {same} AND ({self.due})"
        return f"DELETE FROM {self.table} t USING {keys} {where}"  # noqa: S608 (constants)


_EVENT_KEYS = (("user_id", "text"), ("correlation_id", "text"), ("step_key", "text"))

# Published (or abandoned) records: a redelivery can no longer come after Pub/Sub's retention.
_PROCESSED_EVENTS = Rule(
    "processed_events",
    _EVENT_KEYS,
    "user_id",
    "t.claimed_at < %(cutoff)s AND (t.published AND t.published_at < %(cutoff)s"
    " OR NOT t.published AND t.lease_until < least(%(cutoff)s, %(clock)s))",
)

# Tool calls go with the event records they belong to: a call is kept as long as its event's
# record may still meet a redelivery (the record is what makes the redelivery replay it), and
# goes once the record has gone. A call can only be made under its event's claim, so every
# call of a run had a record; "started before the cutoff" reads by index and leaves alone the
# calls of an event whose record is being claimed right now.
_TOOL_CALLS = Rule(
    "tool_calls",
    (*_EVENT_KEYS, ("call_index", "integer")),
    "user_id",
    "t.started_at < %(cutoff)s AND NOT EXISTS (SELECT 1 FROM processed_events p"
    " WHERE p.user_id = t.user_id AND p.correlation_id = t.correlation_id"
    " AND p.step_key = t.step_key)",
)

_TURN_KEYS = (("user_id", "text"), ("thread_id", "text"), ("seq", "bigint"))
_OLD_TURNS = Rule("conversation_turns", _TURN_KEYS, "user_id", "t.created_at < %(cutoff)s")

# The copies of a shared channel's newest turns (its window) expire with the turns.
_OLD_CHANNEL_TURNS = Rule(
    "channel_turns",
    (("thread_id", "text"), ("seq", "bigint")),
    "thread_id",
    "t.created_at < %(cutoff)s",
)

# seq is gap-free per thread, so the newest N turns of a thread are those above its last_seq
# - N: the bounds of the threads longer than the cap are read first (a shared channel's
# counter is not on its turns' shards), and a turn's seq never changes.
_LONG_THREADS = """
SELECT thread_id, last_seq - %(cap)s FROM conversation_threads WHERE last_seq > %(cap)s
"""
_TURNS_BEYOND_CAP = Rule(
    "conversation_turns",
    _TURN_KEYS,
    "user_id",
    "b.thread_id = t.thread_id AND t.seq <= b.bound",
    using=", unnest(%(threads)s::text[], %(bounds)s::bigint[]) AS b(thread_id, bound)",
)

# A thread row whose turns are all gone; a new message starts it again. Every turn of a thread
# idle since before the cutoff went with the expired turns above, so the checks only keep a row
# a pair is being written to: a DM's turns are its user's, a shared channel's newest are in its
# window's copy.
_EMPTY_THREADS = Rule(
    "conversation_threads",
    (("tenant", "text"), ("thread_id", "text")),
    "tenant",
    "t.last_turn_at < %(cutoff)s"
    " AND NOT EXISTS (SELECT 1 FROM conversation_turns u"
    " WHERE u.user_id = t.tenant AND u.thread_id = t.thread_id)"
    " AND NOT EXISTS (SELECT 1 FROM channel_turns w WHERE w.thread_id = t.tenant)",
)

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
_MEMORY_VERSIONS = Rule(
    "memory_versions",
    (("user_id", "text"), ("key", "text"), ("version", "integer")),
    "user_id",
    "t.valid_to < %(cutoff)s"
    " OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.user_id = t.user_id AND m.key = t.key)",
)


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

    async def sweep(name: str, rule: Rule, params: dict[str, Any]) -> None:
        deleted[name] = await _sweep(name, partial(_by_rule, connection, rule, params), progress)

    if policy.processed_events_days:
        cutoff = now - timedelta(days=policy.processed_events_days)
        await sweep("processed_events", _PROCESSED_EVENTS, {**batch, "cutoff": cutoff})
        await sweep("tool_calls", _TOOL_CALLS, {**batch, "cutoff": cutoff})
    if policy.history_days:
        cutoff = now - timedelta(days=policy.history_days)
        await sweep("turns_expired", _OLD_TURNS, {**batch, "cutoff": cutoff})
        await sweep("channel_turns_expired", _OLD_CHANNEL_TURNS, {**batch, "cutoff": cutoff})
        await sweep("threads_empty", _EMPTY_THREADS, {**batch, "cutoff": cutoff})
    if policy.history_turns_per_thread:
        deleted["turns_beyond_cap"] = await _cap_threads(connection, policy, progress)
    if policy.memories_per_user:
        deleted["memories_beyond_cap"] = await _cap_memories(connection, policy, progress)
    if policy.history_days or policy.memories_per_user:
        days = policy.history_days
        cutoff = now - timedelta(days=days) if days else datetime.min.replace(tzinfo=now.tzinfo)
        await sweep("memory_versions", _MEMORY_VERSIONS, {**batch, "cutoff": cutoff})
    return deleted


async def _cap_threads(
    connection: AsyncConnection[Any], policy: RetentionPolicy, progress: Progress
) -> int:
    """The turns beyond the cap of each thread longer than it, a batch of threads at a time."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_LONG_THREADS, {"cap": policy.history_turns_per_thread})
        long = await cursor.fetchall()
    total = 0
    for start in range(0, len(long), policy.batch_rows):
        page = long[start : start + policy.batch_rows]
        params = {
            "batch": policy.batch_rows,
            "threads": [thread for thread, _ in page],
            "bounds": [bound for _, bound in page],
        }
        total += await _sweep(
            "turns_beyond_cap", partial(_by_rule, connection, _TURNS_BEYOND_CAP, params)
        )
    progress(f"turns_beyond_cap: {total} deleted")
    return total


async def _cap_memories(
    connection: AsyncConnection[Any], policy: RetentionPolicy, progress: Progress
) -> int:
    params: dict[str, Any] = {"batch": policy.batch_rows, "cap": policy.memories_per_user}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_USERS_OVER_CAP, params)
        users = [user for (user,) in await cursor.fetchall()]
    total = 0
    for user in users:
        each = {**params, "user": user}
        total += await _sweep(
            "memories_beyond_cap", partial(_by_statement, connection, _MEMORIES_BEYOND_CAP, each)
        )
    progress(f"memories_beyond_cap: {total} deleted")
    return total


# One batch: the rows it deleted, and whether it was full (more may be due).
Batch = Callable[[], Awaitable[tuple[int, bool]]]


async def _by_rule(
    connection: AsyncConnection[Any], rule: Rule, params: dict[str, Any]
) -> tuple[int, bool]:
    """Find a batch of due rows, delete those still due."""
    params = {**params, "clock": utc_now()}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(rule.find, params)
        found = await cursor.fetchall()
    if not found:
        return 0, False
    keys = {column: [row[i] for row in found] for i, (column, _) in enumerate(rule.keys)}
    cursor = await connection.execute(rule.delete, {**params, **keys})
    return cursor.rowcount, len(found) >= params["batch"]


async def _by_statement(
    connection: AsyncConnection[Any], statement: str, params: dict[str, Any]
) -> tuple[int, bool]:
    cursor = await connection.execute(statement, params)
    return cursor.rowcount, cursor.rowcount >= params["batch"]


async def _sweep(rule: str, batch: Batch, progress: Progress | None = None) -> int:
    """Run ``batch`` (each its own transaction) until one is not full."""
    total, last_report = 0, time.monotonic()
    while True:
        deleted, full = await batch()
        total += deleted
        if progress and time.monotonic() - last_report >= PROGRESS_EVERY_S:
            progress(f"{rule}: {total} deleted so far")
            last_report = time.monotonic()
        if not full:
            break
    if progress:
        progress(f"{rule}: {total} deleted")
    return total
