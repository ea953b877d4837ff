"""One message, start to settle: decode, claim, run the graph, commit, publish, ack.

The order is what makes the output effectively-once (DESIGN §2, §5): the output is committed
to ``processed_events`` before it is published, marked published once Pub/Sub confirmed it,
and only then is the message acked. A crash anywhere in between leaves a state that the next
delivery resolves without a second model call (see :mod:`llm_bot.memory.processed_events`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.events.codec import decode, encode
from llm_bot.events.identity import thread_id_of
from llm_bot.events.models import InternalEventV2
from llm_bot.events.routing import advance, complete_current_step, current_step, prefixed
from llm_bot.graph.builder import LlmBotGraph
from llm_bot.graph.process import ProcessResult, process_event, record_failure
from llm_bot.graph.state import GraphContext
from llm_bot.memory import processed_events as records
from llm_bot.memory.commit import MemoryCommit, source_of, turn_of
from llm_bot.memory.group_commit import GroupCommitter
from llm_bot.settings import Settings
from llm_bot.transport.ack import Delivery, RetryLater, dead_letter_attributes, settle
from llm_bot.transport.publisher import Publisher

logger = logging.getLogger(__name__)

# How long a claim outlives the event's deadline: room to commit the output before another
# instance may take the event over.
LEASE_MARGIN_S = 5.0
# Incoming attributes carried to the output so a trace continues across the hop.
TRACE_ATTRIBUTES = ("traceparent", "tracestate")


def check_route(event: InternalEventV2) -> None:
    """Raise :class:`RoutingError` now if the slip cannot be followed after our step, so a
    broken slip is dead-lettered before it costs a model call."""
    trial = event.model_copy(deep=True)
    complete_current_step(trial, "OK", "")
    advance(trial, "")


def deadline_s(event: InternalEventV2, default_ms: int) -> float:
    """``qos.maxResponseMs`` when the producer set one, else ``LLM_BOT_EVENT_DEADLINE_MS``."""
    wanted = event.qos.max_response_ms if event.qos else None
    return (wanted or default_ms) / 1000


def attempts_exhausted(delivery_attempt: int, event: InternalEventV2, limit: int) -> bool:
    """True on the last delivery we accept: the step's ``maxAttempts`` may lower the limit."""
    step = current_step(event)
    if step is not None and step.max_attempts:
        limit = min(limit, step.max_attempts)
    return delivery_attempt >= limit


def output_of(
    result: ProcessResult, incoming: Mapping[str, str], settings: Settings
) -> records.StoredOutput:
    """Route the processed event (DESIGN §3) and serialize it exactly as it will be published."""
    event = result.event
    hop = advance(event, iso_timestamp(utc_now()), with_prefix=settings.bus_prefix)
    data, attributes = encode(event)
    attributes |= {name: incoming[name] for name in TRACE_ATTRIBUTES if name in incoming}
    ordering_key = thread_id_of(event) if settings.ordering else ""
    return records.StoredOutput(hop.topic, data, attributes, ordering_key, result.outcome)


@dataclass(frozen=True)
class Committer:
    """Writes an event's output record and its memory writes in one (grouped) transaction."""

    group: GroupCommitter
    memory: MemoryCommit | None = None

    async def commit(
        self,
        claim: records.Claim,
        output: records.StoredOutput,
        event: InternalEventV2,
        result: ProcessResult,
    ) -> None:
        memory = self.memory
        turn = turn_of(result, source_of(event), utc_now()) if memory else None
        pair = await memory.prepare(turn) if memory and turn else None

        async def work(connection: AsyncConnection[Any]) -> None:
            await records.store_output(connection, claim, output)
            if memory and turn and pair:
                await memory.apply(connection, turn, pair)

        await self.group.commit(work)


class EventHandler:
    def __init__(
        self,
        settings: Settings,
        graph: LlmBotGraph,
        context: GraphContext,
        pool: AsyncConnectionPool[Any],
        publisher: Publisher,
        counts: Counter[str],
        committer: Committer,
    ) -> None:
        self._settings = settings
        self._graph = graph
        self._context = context
        self._pool = pool
        self._publisher = publisher
        self._counts = counts
        self._committer = committer

    async def handle(self, delivery: Delivery) -> None:
        self._counts["received"] += 1
        async with settle(delivery, self._dead_letter, self._counts):
            await self._handle(delivery)

    async def _handle(self, delivery: Delivery) -> None:
        settings = self._settings
        event = decode(delivery.data, delivery.attributes, settings.max_message_bytes)
        check_route(event)
        limit_s = deadline_s(event, settings.event_deadline_ms)
        claimed = await records.claim_or_wait(
            self._pool, records.key_of(event), limit_s + LEASE_MARGIN_S
        )
        if isinstance(claimed, records.Published):
            self._counts["duplicates"] += 1
            return
        if claimed.stored is not None:
            self._counts["republished"] += 1
            await self._publish(claimed.key, claimed.stored)
            return
        try:
            result = await self._run(event, delivery.delivery_attempt, limit_s)
        except (RetryLater, asyncio.CancelledError):  # cancelled: shutdown hands it back
            await self._release(claimed)
            raise
        output = output_of(result, delivery.attributes, settings)
        await self._committer.commit(claimed, output, event, result)
        await self._publish(claimed.key, output)
        self._counts[f"outcome_{result.outcome}"] += 1

    async def _run(
        self, event: InternalEventV2, delivery_attempt: int, limit_s: float
    ) -> ProcessResult:
        """The graph's result, or :class:`RetryLater` while retries are left."""
        result = await self._graph_result(event, limit_s)
        limit = self._settings.max_delivery_attempts
        if result.retryable and not attempts_exhausted(delivery_attempt, event, limit):
            assert result.error is not None
            raise RetryLater(f"{result.error.code}: {result.error.message}")
        return result

    async def _graph_result(self, event: InternalEventV2, limit_s: float) -> ProcessResult:
        """The deadline ends the event as ERROR ``TIMEOUT`` (permanent: the producer's time is
        up); an unexpected exception is an ``INTERNAL`` error that a retry may cure."""
        scope = asyncio.timeout(limit_s)
        try:
            async with scope:
                return await process_event(self._graph, self._context, event)
        except TimeoutError:
            if not scope.expired():
                raise
            code, message, retryable = "TIMEOUT", f"no result within {limit_s * 1000:.0f} ms", False
        except Exception:
            logger.exception("graph failed", extra={"correlationId": event.correlation_id})
            code, message, retryable = "INTERNAL", "llm-bot failed unexpectedly", True
        return record_failure(event.model_copy(deep=True), self._context, code, message, retryable)

    async def _publish(self, key: records.EventKey, output: records.StoredOutput) -> None:
        await self._publisher.publish(
            output.topic, output.data, output.attributes, output.ordering_key
        )
        try:
            async with self._pool.connection() as connection:
                await records.mark_published(connection, key)
        except Exception as error:
            # Acking is still right: unmarked, only a *new* copy of the event would publish
            # the stored output again, and that copy is identical.
            logger.warning("could not record a confirmed publish: %s", error)

    async def _release(self, claim: records.Claim) -> None:
        try:
            async with self._pool.connection() as connection:
                await records.release(connection, claim)
        except Exception as error:  # the lease expires by itself
            logger.warning("could not release a claim: %s", error)

    async def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        attributes = dead_letter_attributes(delivery, reason, iso_timestamp(utc_now()))
        topic = prefixed(self._settings.deadletter_topic, self._settings.bus_prefix)
        await self._publisher.publish(topic, delivery.data, attributes)
