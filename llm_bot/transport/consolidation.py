"""Consolidation on the bus: the sweep that turns closed sessions into jobs, and the handler
that works a job off its own subscription.

**When a session closes.** A thread's session closes after ``SESSION_IDLE_SECONDS`` of silence
or at ``LLM_BOT_CONSOLIDATION_TURN_CAP`` turns not yet consolidated. Silence is an absence, so
no event announces it: a periodic sweep (every ``LLM_BOT_CONSOLIDATION_SWEEP_S``) reads, in one
bounded statement over a partial index of the threads with unconsolidated turns, the threads
whose window closed (:data:`llm_bot.memory.turns.CLOSED_WINDOWS`). Waiting for the thread's
next event instead would never consolidate the last session of a user who does not come back,
and would put the job's publish on an answer's path. The window is everything since the last
job, so a burst of sessions in a thread is one job (the debounce); a job is published, then the
thread's mark moved on from where the sweep read it, so two instances' sweeps move it once,
and a job published twice (a crash between the two steps, two sweeps) has one key in the
processed-events ledger.

**A job, once.** The handler reads the window, claims the job's ledger row, asks the model
(:mod:`llm_bot.consolidation.derive`), and commits the writes with the row marked done in one
transaction: a copy of the job finds the row done and is acked. A job of an erased thread or
user finds no turns and is acked having written nothing; one erased while it runs finds its
sources gone when it writes (:mod:`llm_bot.consolidation.derive`). A failing model or an
invalid reply releases the claim and nacks after a backoff
(:func:`llm_bot.transport.ack.settle`), and on the last delivery attempt records the job
failed and dead-letters it with the reason: no job is retried forever, and none waits on
another.

**Never in the answer's way.** Jobs have their own subscription, flow control
(``LLM_BOT_CONSOLIDATION_MAX_IN_FLIGHT``), model client and database pool, and their claim's
lease covers the job's deadline, so nothing is renewed on the answering's lease keeper.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row

from llm_bot.clock import utc_now
from llm_bot.consolidation.derive import Consolidator, Planned
from llm_bot.consolidation.extraction import InvalidOutput, WindowTurn
from llm_bot.consolidation.jobs import Job, decode_job, encode_job
from llm_bot.db import processed_events
from llm_bot.db.group_commit import LockKey, Work
from llm_bot.errors import DeadLetterError, RetryLaterError
from llm_bot.events.models import Outcome
from llm_bot.events.routing import prefixed
from llm_bot.llm.errors import ModelError
from llm_bot.memory import turns
from llm_bot.memory.store import MemoryStore
from llm_bot.settings import Settings
from llm_bot.transport.ack import Delivery, settle
from llm_bot.transport.handler import publish_dead_letter
from llm_bot.transport.publisher import EventPublisher
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)

JOB_TYPE = "llmbot.consolidate.v1"
SWEEP_BATCH = 100
# A claim outlives the job's deadline by this much, so a live holder keeps it without renewal.
LEASE_MARGIN_S = 5.0


class ConsolidationFailed(DeadLetterError):
    """The job failed on its last delivery attempt."""

    kind = "consolidation_failed"


class JobFailed(RetryLaterError):
    """The job failed on this attempt; a later one may not."""


class Sweeper:
    """Publishes a job per thread whose session closed (the module's docstring)."""

    def __init__(self, store: MemoryStore, publisher: EventPublisher, settings: Settings) -> None:
        self._store = store
        self._publisher = publisher
        self._topic = prefixed(settings.consolidation_topic, settings.bus_prefix)
        self._idle = timedelta(seconds=settings.session_idle_seconds)
        self._cap = settings.consolidation_turn_cap // 2 * 2  # whole pairs
        self._interval_s = settings.consolidation_sweep_s

    async def run(self) -> None:
        """Sweep every interval until cancelled; a full batch is followed at once by the next."""
        while True:
            try:
                swept = await self.sweep()
            except Exception as error:  # a database or bus outage: the next sweep tries again
                logger.warning("consolidation sweep failed: %s", error)
                swept = 0
            if swept < SWEEP_BATCH:
                await asyncio.sleep(self._interval_s)

    async def sweep(self) -> int:
        """One batch: the jobs published."""
        params = {"idle_before": utc_now() - self._idle, "cap": self._cap, "batch": SWEEP_BATCH}
        async with self._store.connection() as connection:
            async with connection.cursor(row_factory=tuple_row) as cursor:
                await cursor.execute(turns.CLOSED_WINDOWS, params)
                windows = await cursor.fetchall()
            for thread_id, from_seq, to_seq in windows:
                job = Job(thread_id, int(from_seq), int(to_seq))
                await self._publisher.publish(self._topic, encode_job(job), {"type": JOB_TYPE})
                mark = {**turns.thread_row(thread_id), "from_seq": from_seq, "to_seq": to_seq}
                await connection.execute(turns.MARK_CONSOLIDATED, mark)
                await connection.commit()
        return len(windows)


class ConsolidationHandler:
    """One job from receipt to settlement (the module's docstring)."""

    def __init__(
        self,
        *,
        settings: Settings,
        consolidator: Consolidator,
        store: MemoryStore,
        publisher: EventPublisher,
        stats: WorkerStats,
    ) -> None:
        self._settings = settings
        self._consolidator = consolidator
        self._store = store
        self._publisher = publisher
        self._stats = stats
        self._deadline_s = settings.consolidation_deadline_s
        self._lease_s = self._deadline_s + LEASE_MARGIN_S

    async def handle(self, delivery: Delivery) -> None:
        async with settle(delivery, self._dead_letter, self._stats):
            job = decode_job(delivery.data)
            window = await self._consolidator.window(job)
            if not window:  # erased or expired: nothing to derive from, nothing written
                logger.info("consolidation job without turns", extra={"job": job.window})
                return
            claimed = await processed_events.claim_or_wait(
                self._transact, job.key, lease_s=self._lease_s, wait_s=self._lease_s
            )
            if isinstance(claimed, processed_events.Published) or claimed.stored is not None:
                self._stats.duplicates += 1
                return
            attempt = max(delivery.delivery_attempt, claimed.attempt)
            try:
                async with asyncio.timeout(self._deadline_s):
                    await self._work(job, window, claimed)
            except BaseException as error:
                await self._release(claimed)
                if not isinstance(error, (ModelError, InvalidOutput, TimeoutError)):
                    raise
                reason = f"consolidation of {job.key.correlation_id} failed: {_why(error)}"
                if attempt < self._settings.max_delivery_attempts:
                    raise JobFailed(reason) from error
                await self._record_failure(job)
                raise ConsolidationFailed(f"{reason} (attempt {attempt})") from error

    async def _work(
        self, job: Job, window: list[WindowTurn], claim: processed_events.Claim
    ) -> None:
        consolidator = self._consolidator
        speakers = sorted({turn.user_id for turn in window if turn.role == "user"})
        known = await consolidator.known(job, speakers)
        derived, usage = await consolidator.derive(window, known, None)
        vectors = await consolidator.vectors(
            [fact.content for fact in derived.facts]
            + ([derived.summary] if derived.summary is not None else [])
        )
        planned = Planned(
            keys=await consolidator.keys(derived.facts),
            fact_vectors=vectors[: len(derived.facts)],
            summary_vector=vectors[-1] if derived.summary is not None else None,
        )
        applied: list[Any] = []

        async def write(connection: AsyncConnection[Any]) -> None:
            space = await self._record(connection, claim, job, "OK")
            applied[:] = [
                await consolidator.apply(connection, job, window, derived, planned, space)
            ]

        await self._transact(write, ())
        logger.info(
            "consolidation job done",
            extra={
                "job": job.key.correlation_id,
                "facts": applied[0].facts,
                "factsDropped": derived.dropped,
                "sourcesGone": applied[0].sources_gone,
                "summaries": applied[0].summaries,
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
            },
        )

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

    async def _record_failure(self, job: Job) -> None:
        """The failed job's row closed, so a copy of it is not tried again: claimed anew (the
        lease was released), then recorded as ERROR."""
        claim = await processed_events.claim_or_wait(
            self._transact, job.key, lease_s=self._lease_s, wait_s=0.0
        )
        if isinstance(claim, processed_events.Claim):
            await self._transact(lambda c: self._record(c, claim, job, "ERROR"), ())

    async def _transact(self, work: Work, keys: Collection[LockKey]) -> None:
        """``work`` in a transaction of the store's pool (the answering's group committer is
        not shared). The ledger reads rows as tuples, the store's pool hands out dicts."""
        async with self._store.connection() as connection, connection.transaction():
            connection.row_factory = tuple_row
            try:
                await work(connection)
            finally:
                connection.row_factory = dict_row

    async def _release(self, claim: processed_events.Claim) -> None:
        try:
            async with self._store.connection() as connection:
                await processed_events.release(connection, claim)
        except Exception as error:  # the lease expires by itself
            logger.warning("could not release a consolidation claim: %s", error)

    async def _dead_letter(self, delivery: Delivery, error: DeadLetterError) -> None:
        await publish_dead_letter(self._publisher, self._settings, delivery, error)


def _why(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "the job's deadline passed"
    return f"{type(error).__name__}: {error}"
