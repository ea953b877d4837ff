"""One message, read top to bottom in :meth:`EventHandler.handle`: receive, claim, answer
(:mod:`llm_bot.answer`), commit, publish; :func:`llm_bot.transport.ack.settle` decides and
acks, nacks or dead-letters. Every scope the handling needs (the span, the settlement, the log
ids, the group commit's expectation, the claim's lease, the progress message) is entered on one
exit stack, so it ends in the reverse order, whatever ends the handling.

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
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

from opentelemetry.trace import SpanKind
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.answer.unit import Answer, Answerer
from llm_bot.bus_names import prefixed
from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.db import processed_events
from llm_bot.db.gathered_marks import GatheredMarks
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.leases import LeaseKeeper
from llm_bot.errors import DeadLetterError
from llm_bot.events.codec import encode
from llm_bot.events.deadletter import Cause, deadletter_body
from llm_bot.events.inbound import EventKey, Inbound, received
from llm_bot.events.limits import MAX_ATTRIBUTE_BYTES
from llm_bot.events.models import SOURCE
from llm_bot.events.routing import advance, hop_attributes
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics
from llm_bot.telemetry.logs import event_ids
from llm_bot.telemetry.traces import (
    annotate_current,
    child_span,
    consumer_span,
    current_trace_id,
    inject,
)
from llm_bot.transport.ack import Delivery, clipped, dead_letter_attributes, settle
from llm_bot.transport.decision import Answered, Attempt, Decision
from llm_bot.transport.ledgered import Ledgered
from llm_bot.transport.progress import ProgressFeedback, ProgressWatch, add_operation_context
from llm_bot.transport.publisher import EventPublisher
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)


class AttemptsExhausted(DeadLetterError):
    """The event came back after its last attempt: each one failed past the point where the
    failure is recorded (a crash, a publish that never confirmed). Retrying would never end."""

    kind = "attempts_exhausted"


def output_of(
    answer: Answer, inbound: Inbound, settings: Settings
) -> processed_events.StoredOutput:
    """Route the answered event (:func:`llm_bot.events.routing.advance`) and serialize it exactly
    as it will be published, with the current trace context in its attributes so the next stage
    continues the trace."""
    event = answer.event
    hop = advance(event, iso_timestamp(utc_now()), with_prefix=settings.bus_prefix)
    data, encoded_attributes = encode(event)
    attributes = {**hop_attributes(event, hop), **encoded_attributes, "source": SOURCE}
    inject(attributes)
    thread_id = inbound.thread_id
    ordering_key = thread_id if settings.ordering else ""
    return processed_events.StoredOutput(
        hop.topic, data, attributes, ordering_key, answer.outcome, thread_id
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
        self._group = group
        self._publisher = publisher
        self._stats = stats
        self._ledgered = Ledgered(group.commit, pool.connection, leases)
        self._marks = GatheredMarks(group)
        self._progress = ProgressFeedback(
            publisher,
            stats,
            after_ms=settings.progress_after_ms,
            bus_prefix=settings.bus_prefix,
        )
        self._subscription = prefixed(settings.subscription, settings.bus_prefix)

    async def handle(self, delivery: Delivery) -> None:
        """One message from receipt to settlement, top to bottom. Every scope it needs is
        entered on one exit stack and ends in reverse order: the claim's before the settlement
        acts, so a nack's backoff holds no claim and no group commit."""
        settings = self._settings
        async with AsyncExitStack() as scopes:
            counted = scopes.enter_context(self._counted(delivery))
            attempt = delivery.delivery_attempt
            span = consumer_span(
                self._subscription, delivery.message_id, attempt, delivery.attributes
            )
            scopes.enter_context(span)
            settling = await scopes.enter_async_context(
                settle(delivery, self._dead_letter, self._stats)
            )
            inbound = received(delivery.data, delivery.attributes, settings, attempt)
            event = inbound.event
            # Set only to a trace: a null where the producer wrote nothing is a change, and a
            # strict reader refuses it (the envelope's traceId is a string).
            if event.trace_id is None and (trace_id := current_trace_id()) is not None:
                event.trace_id = trace_id
            ids = {"userId": inbound.user_id, "threadId": inbound.thread_id}
            scopes.enter_context(event_ids(correlationId=event.correlation_id, **ids))
            # Tells the group committer this event will hand in work (its claim, its output):
            # an event alone then commits without waiting for company that is not coming.
            scopes.enter_context(self._group.expecting_work())
            claimed = await self._claim(inbound)
            if isinstance(claimed, processed_events.Published):
                self._stats.duplicates += 1
                counted["outcome"] = "duplicate"
                return
            await scopes.enter_async_context(self._ledgered.holding(claimed, settling))
            if claimed.stored is not None:
                self._stats.republished += 1
                await self._publish(claimed.key, claimed.stored)
                counted["outcome"] = "republished"
                return
            # Our count of claims: processing began that often and never finished (a delivery
            # to a worker that died before claiming it is not one: Pub/Sub counts those too).
            given_up = Attempt(claimed.attempt, inbound.last_attempt).given_up()
            if given_up is not None:
                raise AttemptsExhausted(given_up)
            add_operation_context(event)
            progress = self._progress.watch(event, first_claim=claimed.attempt == 1)
            scopes.push_async_callback(progress.settled)  # never under way once settled
            context = progress.bind(self._answerer.context)
            answer = await self._answerer.answer(inbound, context=context)
            progress.stop()  # the answer exists: no "thinking" from now on
            # Pub/Sub counts deliveries only on a subscription with a dead-letter policy.
            answered = Answered(
                answer, Attempt(max(attempt, claimed.attempt), inbound.last_attempt)
            )
            if settling.report(answered) is not Decision.FORWARD:
                return  # handed back for a later attempt: counted as failed
            await self._forward(claimed, answer, inbound, progress)
            self._stats.count_outcome(answer.outcome)
            counted["outcome"] = answer.outcome

    @contextmanager
    def _counted(self, delivery: Delivery) -> Iterator[dict[str, str]]:
        """One ``llmbot_events`` count per delivery, however it ends, labelled by how the block
        says it ended: its step's outcome (OK, SKIP, ERROR), duplicate, republished, or else
        failed."""
        self._stats.received += 1
        began = time.perf_counter()
        metrics.in_flight.add(1)
        metrics.queue_lag.record(max(0.0, (utc_now() - delivery.publish_time).total_seconds()))
        labels = {"outcome": "failed"}
        try:
            yield labels
        finally:
            metrics.in_flight.add(-1)
            metrics.events.add(1, labels)
            metrics.event_duration.record(time.perf_counter() - began, labels)

    async def _claim(self, inbound: Inbound) -> processed_events.Claim | processed_events.Published:
        settings = self._settings
        key = inbound.key
        deadline_s = inbound.deadline_s or 0.0
        with metrics.timed(metrics.stage_duration, {"stage": "claim"}):
            return await self._ledgered.claim(
                key,
                lease_s=settings.claim_lease_s,
                wait_s=deadline_s + settings.claim_lease_s,
                marks=self._marks.of(key.user_id),
            )

    async def _forward(
        self,
        claimed: processed_events.Claim,
        answer: Answer,
        inbound: Inbound,
        progress: ProgressWatch,
    ) -> None:
        """Commit the output with the answer's memory writes in one (grouped) transaction,
        then publish it once a progress message under way went out. The answer's explanation
        is stored with the output and named on the event's span (the GenAI conventions' "stored
        externally, referenced from the span"): ``llm-bot explain`` shows it."""
        explained = answer.explanation
        if explained is not None:
            annotate_current({"llm_bot.explanation.id": inbound.key.correlation_id})
        with child_span("send", kind=SpanKind.PRODUCER) as span:
            output = output_of(answer, inbound, self._settings)  # carries this span's context
            span.update_name(f"send {output.topic}")
            span.set_attributes(
                {
                    "messaging.system": "gcp_pubsub",
                    "messaging.operation.type": "send",
                    "messaging.destination.name": output.topic,
                }
            )

            with metrics.timed(metrics.stage_duration, {"stage": "commit"}):
                writes = await self._answerer.prepare(answer)
                explanation = None if explained is None else explained.to_json()

                async def work(connection: AsyncConnection[Any]) -> None:
                    # The store first: its statement also takes the embedding space's guard,
                    # which must come before the memory writes touch a table the re-embedding
                    # alters; it stores the answer's explanation too.
                    space = await processed_events.store_output(
                        connection, claimed, output, explanation
                    )
                    await writes.apply(connection, space)

                keys = [processed_events.row_key(claimed.key), *writes.keys]
                await self._group.commit(work, keys)
            await progress.settled()
            await self._publish(claimed.key, output)

    async def _publish(self, key: EventKey, output: processed_events.StoredOutput) -> None:
        with metrics.timed(metrics.stage_duration, {"stage": "publish"}):
            await self._publisher.publish(
                output.topic, output.data, output.attributes, output.ordering_key
            )
        # Acking need not wait for the mark: unmarked (a crash may lose it), the row only makes
        # a *new* copy of the event publish the stored output again, and that copy is identical.
        self._marks.of(key.user_id).add(key)

    async def _dead_letter(self, delivery: Delivery, error: DeadLetterError) -> None:
        await publish_dead_letter(self._publisher, self._settings, delivery, error)


async def publish_dead_letter(
    publisher: EventPublisher, settings: Settings, delivery: Delivery, error: DeadLetterError
) -> None:
    """``delivery`` to the dead-letter topic with ``error`` as its reason (the body BitBrat's
    persistence reads, :mod:`llm_bot.events.deadletter`)."""
    metrics.deadletters.add(1, {"reason": error.kind})
    reason = str(error)
    now = iso_timestamp(utc_now())
    attributes = dead_letter_attributes(delivery, reason, now)
    cause = Cause(clipped(reason, MAX_ATTRIBUTE_BYTES), reason, SOURCE, now)
    body = deadletter_body(delivery.data, delivery.attributes, cause)
    await publisher.publish(dead_letter_topic(settings), body, attributes)


def dead_letter_topic(settings: Settings) -> str:
    """The topic each dead letter goes to with its reason (``LLM_BOT_DEADLETTER_TOPIC``)."""
    return prefixed(settings.deadletter_topic, settings.bus_prefix)
