"""Work done once under a claim in the processed-events ledger, the same way for every kind of
work a message brings (an event to answer, a consolidation job): claim the message's row or
find it done, hold the claim while the work runs, and give it back at once when the work fails
or the message is handed back, so a redelivery need not wait the lease out.

What differs between the kinds is passed in: how a claim's transaction commits (the answering's
group committer, or a job's own pool) and whether a lease keeper renews the claim while it is
held (an answer's lease is short and renewed; a job's covers its whole deadline).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db import processed_events
from llm_bot.db.leases import LeaseKeeper
from llm_bot.events.inbound import EventKey
from llm_bot.transport.ack import Settling
from llm_bot.transport.decision import Decision

logger = logging.getLogger(__name__)

Connect = Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]]
# A release is one row's update: far longer than this, something holds the table.
RELEASE_TIMEOUT_S = 5.0


class Ledgered:
    """Claims of one kind of work: committed by ``transact``, released on a connection from
    ``connect`` (within ``release_timeout_s``), renewed by ``leases`` while held (none: the
    lease covers the work)."""

    def __init__(
        self,
        transact: processed_events.Transact,
        connect: Connect,
        leases: LeaseKeeper | None = None,
        release_timeout_s: float = RELEASE_TIMEOUT_S,
    ) -> None:
        self._transact = transact
        self._connect = connect
        self._leases = leases
        self._release_timeout_s = release_timeout_s

    async def claim(
        self,
        key: EventKey,
        *,
        lease_s: float,
        wait_s: float,
        marks: processed_events.PublishedMarks | None = None,
    ) -> processed_events.Claim | processed_events.Published:
        """The claim of ``key``'s row, or the sign that its work is done and published
        (:func:`llm_bot.db.processed_events.claim_or_wait`)."""
        return await processed_events.claim_or_wait(
            self._transact, key, lease_s=lease_s, wait_s=wait_s, marks=marks
        )

    @asynccontextmanager
    async def holding(
        self, claim: processed_events.Claim, settling: Settling
    ) -> AsyncIterator[None]:
        """``claim`` held while the block runs (renewed, when a lease keeper is given), and
        given up at once when the block fails or the settlement hands the message back
        (cancelled too: shutdown hands it back)."""
        renewed = self._leases.holding(claim) if self._leases is not None else nullcontext()
        with renewed:
            try:
                yield
            except BaseException:
                await self.release(claim)
                raise
            if settling.decision is Decision.NACK:
                await self.release(claim)

    async def release(self, claim: processed_events.Claim) -> None:
        """Give ``claim`` back, or give up after ``release_timeout_s``: the lease expires by
        itself, and a release waiting on a locked table would hold the message's nack."""
        try:
            async with asyncio.timeout(self._release_timeout_s), self._connect() as connection:
                await processed_events.release(connection, claim)
        except Exception as error:  # the lease expires by itself
            logger.warning("could not release a claim: %s", str(error) or type(error).__name__)
