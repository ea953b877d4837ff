"""A consolidation job off its own subscription, from receipt to settlement, as
:mod:`llm_bot.transport.handler` takes an event: decode, claim the job's ledger row
(:mod:`llm_bot.transport.ledgered`), work it (:mod:`llm_bot.consolidation.unit`), settle
(:func:`llm_bot.transport.ack.settle`).

**A job, once.** The job's writes commit with its ledger row marked done, in one transaction: a
copy of the job finds the row done and is acked. A job of an erased thread or user finds no
turns and is acked having written nothing; one erased while it runs finds its sources gone when
it writes (:mod:`llm_bot.consolidation.derive`). A failing model, an invalid reply or a passed
deadline gives the claim back and nacks after a backoff; on the last delivery attempt
(:class:`llm_bot.transport.decision.Attempt`) the row is recorded failed and the job
dead-lettered with the reason. A job whose attempts each ended unrecorded (its worker died, or
a failure other than those) is given up the same way once its claims outnumber its attempts,
as an event is (:class:`llm_bot.transport.handler.AttemptsExhausted`): no job is retried
forever, and none waits on another.

**Never in the answer's way.** Jobs have their own subscription, flow control
(``LLM_BOT_CONSOLIDATION_MAX_IN_FLIGHT``), model client and database pool, and their claim's
lease covers the job's deadline, so nothing is renewed on the answering's lease keeper. The
sweep that publishes the jobs is :mod:`llm_bot.consolidation.sweep`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row

from llm_bot.consolidation.extraction import InvalidOutput
from llm_bot.consolidation.jobs import Job, decode_job
from llm_bot.consolidation.unit import Commit, JobUnit, Write
from llm_bot.db import processed_events
from llm_bot.db.batches import LockKey, Work
from llm_bot.errors import DeadLetterError, RetryLaterError
from llm_bot.events.models import Outcome
from llm_bot.llm.errors import ModelError
from llm_bot.memory.store import MemoryStore
from llm_bot.settings import Settings
from llm_bot.transport.ack import Delivery, settle
from llm_bot.transport.decision import Attempt
from llm_bot.transport.handler import publish_dead_letter
from llm_bot.transport.ledgered import Ledgered
from llm_bot.transport.publisher import EventPublisher
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)

# A claim outlives the job's deadline by this much, so a live holder keeps it without renewal.
LEASE_MARGIN_S = 5.0


class ConsolidationFailed(DeadLetterError):
    """The job failed on its last delivery attempt."""

    kind = "consolidation_failed"


class JobFailed(RetryLaterError):
    """The job failed on this attempt; a later one may not."""


class ConsolidationHandler:
    """One job from receipt to settlement (the module's docstring)."""

    def __init__(
        self,
        *,
        settings: Settings,
        unit: JobUnit,
        store: MemoryStore,
        publisher: EventPublisher,
        stats: WorkerStats,
    ) -> None:
        self._settings = settings
        self._unit = unit
        self._store = store
        self._publisher = publisher
        self._stats = stats
        self._ledgered = Ledgered(self._transact, store.connection)
        self._deadline_s = settings.consolidation_deadline_s
        self._lease_s = self._deadline_s + LEASE_MARGIN_S

    async def handle(self, delivery: Delivery) -> None:
        async with settle(delivery, self._dead_letter, self._stats) as settling:
            job = decode_job(delivery.data, self._settings.consolidation_turn_cap)
            window = await self._unit.window(job)
            if not window:  # erased or expired: nothing to derive from, nothing written
                logger.info("consolidation job without turns", extra={"job": job.window})
                return
            claimed = await self._ledgered.claim(
                job.key, lease_s=self._lease_s, wait_s=self._lease_s
            )
            if isinstance(claimed, processed_events.Published) or claimed.stored is not None:
                self._stats.duplicates += 1
                return
            number = max(delivery.delivery_attempt, claimed.attempt)
            attempt = Attempt(number, self._settings.max_delivery_attempts)
            async with self._ledgered.holding(claimed, settling):
                # Our count of claims: each one before died or failed unrecorded, as this would
                # (a delivery to a worker that died before claiming it is not one).
                given_up = Attempt(claimed.attempt, attempt.last).given_up()
                if given_up is not None:
                    await self._transact(lambda c: self._record(c, claimed, job, "ERROR"), ())
                    raise ConsolidationFailed(
                        f"consolidation of {job.key.correlation_id} {given_up}"
                    )
                try:
                    async with asyncio.timeout(self._deadline_s):
                        await self._unit.work(job, window, self._committing(claimed, job))
                except (ModelError, InvalidOutput, TimeoutError) as error:
                    reason = f"consolidation of {job.key.correlation_id} failed: {_why(error)}"
                    if not attempt.is_last:
                        raise JobFailed(reason) from error
                    await self._transact(lambda c: self._record(c, claimed, job, "ERROR"), ())
                    raise ConsolidationFailed(f"{reason} (attempt {number})") from error

    def _committing(self, claim: processed_events.Claim, job: Job) -> Commit:
        """The unit's commit: its writes in the transaction that records the job done."""

        async def commit(write: Write) -> None:
            async def work(connection: AsyncConnection[Any]) -> None:
                await write(connection, await self._record(connection, claim, job, "OK"))

            await self._transact(work, ())

        return commit

    async def _record(
        self,
        connection: AsyncConnection[Any],
        claim: processed_events.Claim,
        job: Job,
        outcome: Outcome,
    ) -> Any:
        """The job done in the ledger (stored and published at once: a job has nothing to
        publish), under the claim's token: raises ClaimLost when another holder took it."""
        output = processed_events.StoredOutput("", b"", {}, "", outcome, job.thread_id)
        space = await processed_events.store_output(connection, claim, output)
        await processed_events.mark_published(connection, [claim.key])
        return space

    async def _transact(self, work: Work, keys: Collection[LockKey]) -> None:
        """``work`` in a transaction of the store's pool (the answering's group committer is
        not shared). The ledger reads rows as tuples, the store's pool hands out dicts."""
        async with self._store.connection() as connection, connection.transaction():
            connection.row_factory = tuple_row
            try:
                await work(connection)
            finally:
                connection.row_factory = dict_row

    async def _dead_letter(self, delivery: Delivery, error: DeadLetterError) -> None:
        await publish_dead_letter(self._publisher, self._settings, delivery, error)


def _why(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "the job's deadline passed"
    return f"{type(error).__name__}: {error}"
