"""Claim leases that last as long as their holder lives, not as long as its slowest event.

A claim's lease is short (``LLM_BOT_CLAIM_LEASE_S``, a few heartbeats) and the worker renews
the leases of every claim it holds at each heartbeat: in one statement on one PostgreSQL, in
one statement per shard on Citus (each its own transaction: a pipeline would make them one), since
one statement over users on several nodes is a two-phase commit that can close a deadlock
between nodes with the events' own writes. A worker that dies stops
renewing, so the events it held are taken over within one lease of its death, instead of
after the longest deadline an event may ask for; a live worker keeps its slow events however
long they take, within their deadline.

A renewal waits on no row lock: it passes over the claims whose rows another transaction holds
at that moment (the group committer storing an event's output or marking it published), which
need no renewal then, and renews them at a later heartbeat
(:func:`llm_bot.db.processed_events.renew` says why rather than a shared lock order). So it can
close no deadlock with the events' own writes. A renewal still running after a whole lease (a
table lock, a server that does not answer) is cut off, its statement cancelled, so the next
heartbeat tries again. A renewal that fails (cut off, a statement timeout, a lost connection) is
counted by reason (``llmbot_lease_renewal_failures``): a lease survives three of them in a row,
not four.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Hashable, Iterator
from typing import Any, Self
from uuid import UUID

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.placements import Placements
from llm_bot.db.processed_events import Claim, renew
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics

logger = logging.getLogger(__name__)

HEARTBEATS_PER_LEASE = 4  # a lease survives three missed heartbeats (a busy loop, a slow query)
# SQLSTATEs of a failed renewal by what an operator reads into them.
_REASONS = {"40P01": "deadlock", "57014": "statement_timeout"}


def failure_reason(error: BaseException, *, connected: bool = True) -> str:
    """The ``reason`` a failed renewal is counted under: a deadlock says renewal met another
    writer's locks; ``pool_timeout`` a pool whose connections are all busy (the pool's wait ran
    out, or the renewal was cut off after a whole lease while it waited, not ``connected``);
    ``timeout`` a database too slow or locked (cut off after a whole lease in its statements);
    a connection one that went away."""
    if isinstance(error, PoolTimeout) or (isinstance(error, TimeoutError) and not connected):
        return "pool_timeout"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, psycopg.Error):
        state = error.sqlstate
        if state is None or state.startswith(("08", "57P")):
            return "connection"
        return _REASONS.get(state, "other")
    return "other"


class LeaseKeeper:
    """``async with``: renews the leases of the claims held (see :meth:`holding`) until left."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        lease_s: float,
        placements: Placements | None = None,
    ) -> None:
        """``placements``: where users' rows are, to renew per shard (none: one statement)."""
        self._pool = pool
        self._lease_s = lease_s
        self._placements = placements
        self._held: dict[UUID, Claim] = {}
        self._task: asyncio.Task[None] | None = None
        self.failures: Counter[str] = Counter()  # renewals that failed, by reason

    @classmethod
    def from_settings(
        cls, pool: AsyncConnectionPool[Any], settings: Settings, committer: GroupCommitter
    ) -> LeaseKeeper:
        """The worker's lease keeper, renewing per shard of the map ``committer`` keeps."""
        return cls(pool, lease_s=settings.claim_lease_s, placements=committer.placements)

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._renew_forever(), name="claim-leases")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @contextlib.contextmanager
    def holding(self, claim: Claim) -> Iterator[None]:
        """Keep ``claim``'s lease alive while the block runs."""
        self._held[claim.token] = claim
        try:
            yield
        finally:
            self._held.pop(claim.token, None)

    async def _renew_forever(self) -> None:
        interval_s = self._lease_s / HEARTBEATS_PER_LEASE
        while True:
            await asyncio.sleep(interval_s)
            if not self._held:
                continue
            connected = False
            try:  # by the end of a lease, what a renewal still running renews has lapsed
                async with asyncio.timeout(self._lease_s), self._pool.connection() as connection:
                    connected = True
                    for claims in self._by_shard():
                        await self._renew_shard(connection, claims)
            except Exception as error:  # no connection: the next heartbeat tries again
                self._count_failure(error, connected=connected)

    async def _renew_shard(self, connection: AsyncConnection[Any], claims: list[Claim]) -> None:
        """One shard's statement, its own transaction: its failure is not the other shards'."""
        try:
            await renew(connection, claims, self._lease_s)
        except Exception as error:  # the next heartbeat tries again; leases outlast a few
            if connection.broken:  # the rest would fail on it too
                raise
            self._count_failure(error)

    def _count_failure(self, error: BaseException, *, connected: bool = True) -> None:
        reason = failure_reason(error, connected=connected)
        self.failures[reason] += 1
        metrics.lease_renewal_failures.add(1, {"reason": reason})
        logger.warning("could not renew claim leases (%s): %s", reason, error)

    def _by_shard(self) -> list[list[Claim]]:
        """The held claims grouped by their user's shard: one group without Citus."""
        shard_map = self._placements.current if self._placements is not None else None
        groups: dict[Hashable, list[Claim]] = {}
        for claim in self._held.values():
            shard = None if shard_map is None else shard_map.shard_of(claim.key.user_id)
            groups.setdefault(shard, []).append(claim)
        return list(groups.values())
