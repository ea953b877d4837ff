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
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from llm_bot.clock import utc_now
from llm_bot.db.processed_events import EXPIRED_EVENTS
from llm_bot.explanation import table as explanations
from llm_bot.lifecycle.provenance import forget_derived
from llm_bot.memory import memories
from llm_bot.memory.turns.upkeep import (
    EMPTY_THREADS,
    EXPIRED_CHANNEL_TURNS,
    EXPIRED_TURNS,
    TURNS_BEYOND_CAP,
)
from llm_bot.memory.versions import EXPIRED_VERSIONS
from llm_bot.platform_tools.ledger import EXPIRED_CALLS
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
    batch = {"batch": policy.batch_rows}
    if policy.processed_events_days:
        cutoff = now - timedelta(days=policy.processed_events_days)
        expired = {**batch, "cutoff": cutoff, "lease_cutoff": min(cutoff, utc_now())}
        deleted["processed_events"] = await _sweep(
            connection, "processed_events", EXPIRED_EVENTS, expired, progress
        )
        deleted["tool_calls"] = await _sweep(
            connection, "tool_calls", EXPIRED_CALLS, {**batch, "cutoff": cutoff}, progress
        )
        deleted["answer_explanations"] = await _sweep(
            connection,
            "answer_explanations",
            explanations.EXPIRED,
            {**batch, "cutoff": cutoff},
            progress,
        )
    if policy.history_days:
        cutoff = now - timedelta(days=policy.history_days)
        params = {**batch, "cutoff": cutoff}
        deleted["turns_expired"] = await _sweep_sources(
            connection, "turns_expired", EXPIRED_TURNS, params, progress, deleted
        )
        deleted["channel_turns_expired"] = await _sweep(
            connection, "channel_turns_expired", EXPIRED_CHANNEL_TURNS, params, progress
        )
        deleted["threads_empty"] = await _sweep(
            connection, "threads_empty", EMPTY_THREADS, params, progress
        )
    if policy.history_turns_per_thread:
        params = {**batch, "cap": policy.history_turns_per_thread}
        deleted["turns_beyond_cap"] = await _sweep_sources(
            connection, "turns_beyond_cap", TURNS_BEYOND_CAP, params, progress, deleted
        )
    if policy.memories_per_user:
        deleted["memories_beyond_cap"] = await _cap_memories(connection, policy, progress)
    if policy.history_days or policy.memories_per_user:
        days = policy.history_days
        cutoff = now - timedelta(days=days) if days else datetime.min.replace(tzinfo=now.tzinfo)
        deleted["memory_versions"] = await _sweep(
            connection, "memory_versions", EXPIRED_VERSIONS, {**batch, "cutoff": cutoff}, progress
        )
    return deleted


async def _cap_memories(
    connection: AsyncConnection[Any], policy: RetentionPolicy, progress: Progress
) -> int:
    params: dict[str, Any] = {"batch": policy.batch_rows, "cap": policy.memories_per_user}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(memories.USERS_OVER_CAP, params)
        users = [user for (user,) in await cursor.fetchall()]
    total = 0
    for user in users:
        total += await _sweep(
            connection, "memories_beyond_cap", memories.BEYOND_CAP, {**params, "user": user}
        )
    progress(f"memories_beyond_cap: {total} deleted")
    return total


async def _sweep_sources(
    connection: AsyncConnection[Any],
    rule: str,
    statement: str,
    params: dict[str, Any],
    progress: Progress,
    deleted: dict[str, int],
) -> int:
    """:func:`_sweep` over turns: each batch and what was derived from it in one transaction,
    the derived rows counted in ``deleted["derived"]``."""

    async def batch() -> int:
        async with connection.transaction():
            cursor = await connection.execute(statement, params)
            taken = [(user, thread, int(seq)) for user, thread, seq in await cursor.fetchall()]
            derived = await forget_derived(connection, taken)
        deleted["derived"] = deleted.get("derived", 0) + derived.total()
        return len(taken)

    return await _sweep(connection, rule, statement, params, progress, batch)


async def _sweep(
    connection: AsyncConnection[Any],
    rule: str,
    statement: str,
    params: dict[str, Any],
    progress: Progress | None = None,
    batch: Callable[[], Awaitable[int]] | None = None,
) -> int:
    """Run ``statement`` (one batch, one transaction; or ``batch``, which runs it) until a batch
    comes back short."""

    async def one() -> int:
        return (await connection.execute(statement, params)).rowcount

    total, last_report = 0, time.monotonic()
    while True:
        rowcount = await (batch or one)()
        total += rowcount
        if progress and time.monotonic() - last_report >= PROGRESS_EVERY_S:
            progress(f"{rule}: {total} deleted so far")
            last_report = time.monotonic()
        if rowcount < params["batch"]:
            break
    if progress:
        progress(f"{rule}: {total} deleted")
    return total
