"""Retention: what ``llm-bot maintain`` deletes, and how without disturbing the workers.

Each rule is a setting whose ``0`` keeps data forever. Enforced by an operator job (a Cloud Run
job on a schedule, ``deploy/``), not by the workers: one small periodic task is cheaper than a
timer in every instance, it is observable as one execution with one report, and an event's
path never shares its CPU or connections with a sweep.

Every rule deletes in batches of ``RETENTION_BATCH_ROWS``, each its own short transaction, so
no lock is held for long. Runs take turns (a session advisory lock, on the coordinator on
Citus), so a retried job beside a scheduled one neither fails nor double-counts: the second
finds what the first left. A batch is picked by a subquery and deleted by a join with it; a
rule whose rows workers still change (a claim renews its lease, a new turn moves its thread's
time) checks its condition again on the row as it is when deleted. Times compare with ``now``,
given by the caller, so tests move the clock; a row under a live claim is never touched
whatever ``now`` says (its lease is compared with the real time too).

Turns that go take what was derived from them (:mod:`llm_bot.lifecycle.provenance`): each batch
of expired or capped turns, and the summaries and facts made from them, in one transaction;
their rows are reported as ``derived``.

Each statement is its table's owner's, written as Citus runs it on distributed tables
(docs/citus.md, "Statements Citus sends whole").
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from psycopg import AsyncConnection

from llm_bot.clock import utc_now
from llm_bot.db.processed_events import records as event_records
from llm_bot.explanation import table as explanations
from llm_bot.lifecycle.provenance import forget_derived
from llm_bot.memory import memories, versions
from llm_bot.memory.turns import upkeep as turns
from llm_bot.memory.turns.rows import Taken
from llm_bot.platform_tools import ledger
from llm_bot.settings import Settings

PROGRESS_EVERY_S = 2.0

# Serialises runs of ``maintain`` (any value no other lock of ours uses).
_LOCK_ID = 0x11B07_0003


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
    """Apply every rule on an autocommit ``connection``, once no other run is under way; rows
    deleted per rule."""
    await connection.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
    try:
        return await _apply(connection, policy, now, progress)
    finally:
        await connection.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))


async def _apply(
    connection: AsyncConnection[Any], policy: RetentionPolicy, now: datetime, progress: Progress
) -> dict[str, int]:
    deleted: dict[str, int] = {}
    size = policy.batch_rows

    async def sweep(rule: str, batch: Batch) -> None:
        deleted[rule] = await _sweep(rule, batch, size, progress)

    async def sweep_turns(rule: str, take: Callable[[], Awaitable[Taken]]) -> None:
        """:func:`sweep` over turns: each batch and what was derived from it in one
        transaction, the derived rows counted in ``deleted["derived"]``."""

        async def batch() -> int:
            async with connection.transaction():
                taken = await take()
                derived = await forget_derived(connection, taken)
            deleted["derived"] = deleted.get("derived", 0) + derived.total()
            return len(taken)

        await sweep(rule, batch)

    if policy.processed_events_days:
        cutoff = now - timedelta(days=policy.processed_events_days)
        lease_cutoff = min(cutoff, utc_now())
        await sweep(
            "processed_events",
            lambda: event_records.delete_expired(connection, cutoff, lease_cutoff, size),
        )
        await sweep("tool_calls", lambda: ledger.delete_expired(connection, cutoff, size))
        await sweep(
            "answer_explanations", lambda: explanations.delete_expired(connection, cutoff, size)
        )
    if policy.history_days:
        history_cutoff = now - timedelta(days=policy.history_days)
        await sweep_turns(
            "turns_expired", lambda: turns.delete_expired_turns(connection, history_cutoff, size)
        )
        await sweep(
            "channel_turns_expired",
            lambda: turns.delete_expired_channel_turns(connection, history_cutoff, size),
        )
        await sweep(
            "threads_empty", lambda: turns.delete_empty_threads(connection, history_cutoff, size)
        )
    if policy.history_turns_per_thread:
        cap = policy.history_turns_per_thread
        await sweep_turns(
            "turns_beyond_cap", lambda: turns.delete_turns_beyond_cap(connection, cap, size)
        )
        await sweep(
            "channel_turns_beyond_cap",
            lambda: turns.delete_channel_turns_beyond_cap(connection, cap, size),
        )
    if policy.memories_per_user:
        deleted["memories_beyond_cap"] = await _cap_memories(connection, policy, progress)
    if policy.history_days or policy.memories_per_user:
        days = policy.history_days
        cutoff = now - timedelta(days=days) if days else datetime.min.replace(tzinfo=now.tzinfo)
        await sweep("memory_versions", lambda: versions.delete_expired(connection, cutoff, size))
    return deleted


async def _cap_memories(
    connection: AsyncConnection[Any], policy: RetentionPolicy, progress: Progress
) -> int:
    cap, size = policy.memories_per_user, policy.batch_rows
    total = 0
    for user in await memories.users_over_cap(connection, cap):
        batch = partial(memories.delete_beyond_cap, connection, user, cap, size)
        total += await _sweep("memories_beyond_cap", batch, size)
    progress(f"memories_beyond_cap: {total} deleted")
    return total


# One batch of a rule, one transaction: rows deleted.
Batch = Callable[[], Awaitable[int]]


async def _sweep(rule: str, batch: Batch, size: int, progress: Progress | None = None) -> int:
    """Run ``batch`` until one comes back short of ``size``; rows deleted."""
    total, last_report = 0, time.monotonic()
    while True:
        rowcount = await batch()
        total += rowcount
        if progress and time.monotonic() - last_report >= PROGRESS_EVERY_S:
            progress(f"{rule}: {total} deleted so far")
            last_report = time.monotonic()
        if rowcount < size:
            break
    if progress:
        progress(f"{rule}: {total} deleted")
    return total
