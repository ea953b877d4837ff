"""One message, start to settle: decode, claim, answer (:mod:`llm_bot.answer`), commit,
publish, ack.

The order is what makes the output effectively-once (README, Failure handling): the output is
committed to ``processed_events`` before it is published, and the message is acked only once Pub/Sub
confirmed the publish. A crash anywhere in between leaves a state that the next delivery resolves
without a second model call (see :mod:`llm_bot.db.processed_events`).

Every write goes through the group committer, so events arriving together share transactions:
the claim and the stored output of one event each wait for their (shared) transaction, since
each must be durable before the next step; the "published" mark rides along with a later one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry.trace import SpanKind
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.answer.unit import Answer, Answerer
from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.db import processed_events
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.leases import LeaseKeeper
from llm_bot.errors import DeadLetterError, RetryLaterError
from llm_bot.events.codec import decode, encode
from llm_bot.events.deadletter import Cause, deadletter_body
from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.events.limits import check_event
from llm_bot.events.models import SOURCE, InternalEventV2
from llm_bot.events.routing import advance, check_route, current_step, hop_attributes, prefixed
from llm_bot.graph.process import ProcessResult
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics
from llm_bot.telemetry.logs import event_ids
from llm_bot.telemetry.traces import child_span, consumer_span, current_trace_id, inject
from llm_bot.transport.ack import (
    MAX_ATTRIBUTE_BYTES,
    Delivery,
    clipped,
    dead_letter_attributes,
    settle,
)
from llm_bot.transport.decision import Decision, Mark, decide
from llm_bot.transport.progress import ProgressFeedback, ProgressWatch, add_operation_context
from llm_bot.transport.publisher import EventPublisher
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)


class AttemptsExhausted(DeadLetterError):
    """The event came back after its last attempt: each one failed past the point where the
    failure is recorded (a crash, a publish that never confirmed). Retrying would never end."""

    kind = "attempts_exhausted"


class RetryableFailure(RetryLaterError):
    """The answer failed in a way a later attempt may not (the model was unavailable), and
    attempts remain."""


def deadline_s(event: InternalEventV2, default_ms: int, max_ms: int) -> float:
    """``qos.maxResponseMs`` when the producer set one (at most ``LLM_BOT_MAX_RESPONSE_MS``),
    else ``LLM_BOT_EVENT_DEADLINE_MS``."""
    wanted = event.qos.max_response_ms if event.qos else None
    return min(wanted or default_ms, max_ms) / 1000


def attempt_limit(event: InternalEventV2, limit: int) -> int:
    """The last attempt we accept: the step's ``maxAttempts`` may lower the setting."""
    step = current_step(event)
    if step is not None and step.max_attempts:
        return min(limit, step.max_attempts)
    return limit


def output_of(result: ProcessResult, settings: Settings) -> processed_events.StoredOutput:
    """Route the processed event (:func:`llm_bot.events.routing.advance`) and serialize it exactly
    as it will be published, with the current trace context in its attributes so the next stage
    continues the trace."""
    event = result.event
    hop = advance(event, iso_timestamp(utc_now()), with_prefix=settings.bus_prefix)
    data, encoded_attributes = encode(event)
    attributes = {**hop_attributes(event, hop), **encoded_attributes, "source": SOURCE}
    inject(attributes)
    thread_id = thread_id_of(event)
    ordering_key = thread_id if settings.ordering else ""
    return processed_events.StoredOutput(
        hop.topic, data, attributes, ordering_key, result.outcome, thread_id
    )


class EventHandler:
    def __init__(
        self,
        *,
        settings: Settings,
        answerer: Answerer,
        pool: AsyncConnectionPool[Any],
        group: GroupCommitter,
        publisher: EventPublisher,
        stats: WorkerStats,
        leases: LeaseKeeper,
    ) -> None:
        self._settings = settings
        self._answerer = answerer
        self._pool = pool
        self._group = group
        self._publisher = publisher
        self._stats = stats
        self._leases = leases
        self._marks = processed_events.PublishedMarks(group.defer)
        self._progress = ProgressFeedback(
            publisher,
            stats,
            after_ms=settings.progress_after_ms,
            bus_prefix=settings.bus_prefix,
        )

    async def handle(self, delivery: Delivery) -> None:
        """One consumer span and one ``llmbot_events`` count per delivery, however it ends."""
        self._stats.received += 1
        began = time.perf_counter()
        metrics.in_flight.add(1)
        metrics.queue_lag.record(max(0.0, (utc_now() - delivery.publish_time).total_seconds()))
        ending = "failed"
        subscription = prefixed(self._settings.subscription, self._settings.bus_prefix)
        try:
            with consumer_span(
                subscription, delivery.message_id, delivery.delivery_attempt, delivery.attributes
            ):
                limit = self._settings.max_delivery_attempts
                async with settle(delivery, self._dead_letter, self._stats, limit):
                    ending = await self._handle(delivery)
        finally:
            metrics.in_flight.add(-1)
            metrics.events.add(1, {"outcome": ending})
            metrics.event_duration.record(time.perf_counter() - began, {"outcome": ending})

    async def _handle(self, delivery: Delivery) -> str:
        """How the event ended, for the metrics' ``outcome`` label: its step's outcome (OK, SKIP,
        ERROR), or duplicate, republished (or it raises)."""
        settings = self._settings
        event = decode(delivery.data, delivery.attributes, settings.max_message_bytes)
        check_event(event, settings.max_slip_steps)
        check_route(event)
        if event.trace_id is None:
            event.trace_id = current_trace_id()
        with event_ids(
            correlationId=event.correlation_id,
            userId=user_id_of(event),
            threadId=thread_id_of(event),
        ):
            return await self._process(delivery, event)

    async def _process(self, delivery: Delivery, event: InternalEventV2) -> str:
        # Tells the group committer this event will hand in work (its claim, its output): an
        # event alone then commits without waiting for company that is not coming.
        with self._group.expecting_work():
            return await self._claim_and_answer(delivery, event)

    async def _claim_and_answer(self, delivery: Delivery, event: InternalEventV2) -> str:
        settings = self._settings
        limit_s = deadline_s(event, settings.event_deadline_ms, settings.max_response_ms)
        with metrics.timed(metrics.stage_duration, {"stage": "claim"}):
            claimed = await processed_events.claim_or_wait(
                self._group.commit,
                processed_events.key_of(event),
                lease_s=settings.claim_lease_s,
                wait_s=limit_s + settings.claim_lease_s,
                marks=self._marks,
            )
        if isinstance(claimed, processed_events.Published):
            self._stats.duplicates += 1
            return "duplicate"
        with self._leases.holding(claimed):
            try:
                return await self._answer(delivery, event, claimed, limit_s)
            except BaseException:  # cancelled too: shutdown hands the event back
                await self._release(claimed)
                raise

    async def _answer(
        self,
        delivery: Delivery,
        event: InternalEventV2,
        claimed: processed_events.Claim,
        limit_s: float,
    ) -> str:
        """Publish the stored output, or answer, commit and publish; how it ended."""
        if claimed.stored is not None:
            self._stats.republished += 1
            await self._publish(claimed.key, claimed.stored)
            return "republished"
        last = attempt_limit(event, self._settings.max_delivery_attempts)
        # Our count of claims: processing began that often and never finished (a delivery to
        # a worker that died before claiming it is not one: Pub/Sub counts those too).
        if decide(Mark.ABANDONED, claimed.attempt - 1, last) is Decision.DEAD_LETTER:
            raise AttemptsExhausted(
                f"gave up after {claimed.attempt - 1} attempts that did not finish"
            )
        # Pub/Sub counts deliveries only on a subscription with a dead-letter policy.
        attempt = max(delivery.delivery_attempt, claimed.attempt)
        add_operation_context(event)
        progress = self._progress.watch(event, first_claim=claimed.attempt == 1)
        try:
            context = progress.bind(self._answerer.context)
            answer = await self._answerer.answer(event, context=context, deadline_s=limit_s)
            progress.stop()  # the answer exists: no "thinking" from now on
            error = answer.result.error
            if decide(answer, attempt, last) is Decision.NACK and error is not None:
                raise RetryableFailure(f"{error.code}: {error.message}")
            await self._send(claimed, answer, progress)
        finally:
            await progress.settled()  # never under way once the event is settled
        self._stats.count_outcome(answer.result.outcome)
        return answer.result.outcome

    async def _send(
        self,
        claimed: processed_events.Claim,
        answer: Answer,
        progress: ProgressWatch,
    ) -> None:
        """Commit the output, then publish it once a progress message under way went out."""
        settings = self._settings
        with child_span("send", kind=SpanKind.PRODUCER) as span:
            output = output_of(answer.result, settings)  # carries this span's context onwards
            span.update_name(f"send {output.topic}")
            span.set_attributes(
                {
                    "messaging.system": "gcp_pubsub",
                    "messaging.operation.type": "send",
                    "messaging.destination.name": output.topic,
                }
            )
            with metrics.timed(metrics.stage_duration, {"stage": "commit"}):
                await self._commit(claimed, output, answer)
            await progress.settled()
            await self._publish(claimed.key, output)

    async def _commit(
        self,
        claim: processed_events.Claim,
        output: processed_events.StoredOutput,
        answer: Answer,
    ) -> None:
        """The output record and the answer's memory writes, in one (grouped) transaction."""
        writes = await self._answerer.prepare(answer)

        async def work(connection: AsyncConnection[Any]) -> None:
            # The store first: its statement also takes the embedding space's guard, which
            # must come before the memory writes touch a table the re-embedding alters.
            space = await processed_events.store_output(connection, claim, output)
            await writes.apply(connection, space)

        await self._group.commit(work, [processed_events.row_key(claim.key), *writes.keys])

    async def _publish(
        self, key: processed_events.EventKey, output: processed_events.StoredOutput
    ) -> None:
        with metrics.timed(metrics.stage_duration, {"stage": "publish"}):
            await self._publisher.publish(
                output.topic, output.data, output.attributes, output.ordering_key
            )
        # Acking need not wait for the mark: unmarked (a crash may lose it), the row only makes
        # a *new* copy of the event publish the stored output again, and that copy is identical.
        self._marks.add(key)

    async def _release(self, claim: processed_events.Claim) -> None:
        try:
            async with self._pool.connection() as connection:
                await processed_events.release(connection, claim)
        except Exception as error:  # the lease expires by itself
            logger.warning("could not release a claim: %s", error)

    async def _dead_letter(self, delivery: Delivery, error: DeadLetterError) -> None:
        metrics.deadletters.add(1, {"reason": error.kind})
        reason = str(error)
        now = iso_timestamp(utc_now())
        attributes = dead_letter_attributes(delivery, reason, now)
        cause = Cause(clipped(reason, MAX_ATTRIBUTE_BYTES), reason, SOURCE, now)
        body = deadletter_body(delivery.data, delivery.attributes, cause)
        topic = prefixed(self._settings.deadletter_topic, self._settings.bus_prefix)
        await self._publisher.publish(topic, body, attributes)
