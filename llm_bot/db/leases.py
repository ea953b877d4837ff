"""Claim leases that last as long as their holder lives, not as long as its slowest event.

A claim's lease is short (``LLM_BOT_CLAIM_LEASE_S``, a few heartbeats) and the worker renews
the leases of every claim it holds at each heartbeat: in one statement on one PostgreSQL, in
one statement per shard on Citus (each its own transaction: a pipeline would make them one), since
one statement over users on several nodes is a two-phase commit that can close a deadlock
between nodes with the events' own writes. A worker that dies stops
renewing, so the events it held are taken over within one lease of its death, instead of
after the longest deadline an event may ask for; a live worker keeps its slow events however
long they take, within their deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterator
from typing import Any, Self
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from llm_bot.db.placements import Placements
from llm_bot.db.processed_events import Claim, renew

logger = logging.getLogger(__name__)

HEARTBEATS_PER_LEASE = 4  # a lease survives three missed heartbeats (a busy loop, a slow query)


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
            try:
                async with self._pool.connection() as connection:
                    for claims in self._by_shard():
                        await renew(connection, claims, self._lease_s)
            except Exception as error:  # the next heartbeat tries again; leases outlast a few
                logger.warning("could not renew claim leases: %s", error)

    def _by_shard(self) -> list[list[Claim]]:
        """The held claims grouped by their user's shard: one group without Citus."""
        shard_map = self._placements.current if self._placements is not None else None
        groups: dict[Hashable, list[Claim]] = {}
        for claim in self._held.values():
            shard = None if shard_map is None else shard_map.shard_of(claim.key.user_id)
            groups.setdefault(shard, []).append(claim)
        return list(groups.values())
