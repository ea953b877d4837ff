"""One event answered: the graph run within the event's deadline, the outcome it ends in, the
pair it adds to history, and the memory writes that make that pair durable.

The worker (:mod:`llm_bot.transport.handler`), ``llm-bot send --local`` and the tests answer
events here alone, so they cannot drift apart: one deadline, one set of failure codes, one
pair. Claiming the event, storing and publishing the output and acking are the transport's:
the worker applies :meth:`Answerer.prepare`'s writes inside the transaction that stores the
output, ``send --local`` commits them alone (:meth:`Answerer.commit`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.embedding_space import EmbeddingSpace
from llm_bot.db.group_commit import LockKey
from llm_bot.db.processed_events import source_of
from llm_bot.errors import ForwardAsError
from llm_bot.events.identity import tenant_of_thread, thread_id_of, user_id_of
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.builder import LlmBotGraph
from llm_bot.graph.process import ProcessResult, process_event, record_failure
from llm_bot.graph.state import GraphContext
from llm_bot.memory.commit import MemoryCommit, Pair

logger = logging.getLogger(__name__)


class DeadlineExceeded(ForwardAsError):
    """The event's deadline (``qos.maxResponseMs``, else ``LLM_BOT_EVENT_DEADLINE_MS``)
    passed: the producer's time is up, so no later attempt can be in time."""

    code = "TIMEOUT"


class InternalFailure(ForwardAsError):
    """An exception nobody expected (a bug, a library's own error): a later attempt may not
    meet it. Its message says nothing of the exception, which may carry anything."""

    code = "INTERNAL"
    retryable = True


@dataclass(frozen=True)
class Answer:
    """The outcome with the updated event, and the pair it adds to history: ``None`` for SKIP,
    ERROR and a refusal, which keep nothing of the message."""

    result: ProcessResult
    pair: Pair | None


# Writes inside the caller's transaction, given the embedding space read under its write
# guard earlier in that transaction (:func:`llm_bot.db.processed_events.store_output`).
ApplyWrites = Callable[[AsyncConnection[Any], EmbeddingSpace | None], Awaitable[None]]


@dataclass(frozen=True)
class Writes:
    """An answer's memory writes with their embeddings made: ``apply`` runs inside the caller's
    transaction and touches what ``keys`` name (the group committer orders works by them), on
    the shards of ``tenants`` (the user's, and a shared channel's for its counter and window)."""

    apply: ApplyWrites
    keys: tuple[LockKey, ...] = ()
    tenants: tuple[str, ...] = ()


async def _nothing(connection: AsyncConnection[Any], space: EmbeddingSpace | None) -> None:
    """The writes of an answer that adds no pair."""


NO_WRITES = Writes(_nothing)


class Answerer:
    """Answers events with one graph and context; ``memory`` is ``None`` without a database
    (``send --local`` with no ``DATABASE_URL``): the pair is then not kept."""

    def __init__(
        self, graph: LlmBotGraph, context: GraphContext, memory: MemoryCommit | None = None
    ) -> None:
        self._graph = graph
        self.context = context
        self._memory = memory

    async def answer(
        self,
        event: InternalEventV2,
        *,
        context: GraphContext | None = None,
        deadline_s: float | None = None,
    ) -> Answer:
        """``event`` answered, never modified. ``context`` replaces the answerer's for this
        event (the worker's arms its progress message); past ``deadline_s`` the step is ERROR
        ``TIMEOUT``. Every failure ends as an ERROR step (:class:`ForwardAsError`)."""
        context = context or self.context
        result = await self._run(event, context, deadline_s)
        return Answer(result, pair_of(result, source_of(event), context.clock()))

    async def _run(
        self, event: InternalEventV2, context: GraphContext, deadline_s: float | None
    ) -> ProcessResult:
        scope = asyncio.timeout(deadline_s)
        if deadline_s is not None:  # the graph's tool calls keep within it (GraphContext.deadline)
            context = replace(context, deadline=asyncio.get_running_loop().time() + deadline_s)
        failure: ForwardAsError
        try:
            async with scope:
                return await process_event(self._graph, context, event)
        except TimeoutError:
            if deadline_s is None or not scope.expired():
                raise
            failure = DeadlineExceeded(f"no result within {deadline_s * 1000:.0f} ms")
        except Exception:
            logger.exception("graph failed", extra={"correlationId": event.correlation_id})
            failure = InternalFailure("llm-bot failed unexpectedly")
        # A fresh copy: the graph's may be half-way through its changes.
        return record_failure(event.model_copy(deep=True), context, failure)

    async def prepare(self, answer: Answer) -> Writes:
        """The memory writes of ``answer``, with every embedding they need made now, outside
        any transaction (an embedding inside one would hold the whole group commit)."""
        memory, pair = self._memory, answer.pair
        if memory is None or pair is None:
            return NO_WRITES
        prepared = await memory.prepare(pair)

        async def apply(connection: AsyncConnection[Any], space: EmbeddingSpace | None) -> None:
            await memory.apply(connection, pair, prepared, space)

        return Writes(
            apply, memory.lock_keys(pair), (pair.user_id, tenant_of_thread(pair.thread_id))
        )

    async def commit(self, answer: Answer) -> None:
        """The memory writes of ``answer`` in a transaction of their own."""
        if self._memory is not None and answer.pair is not None:
            await self._memory.commit_now(answer.pair)


def pair_of(result: ProcessResult, source_event: str, now: datetime) -> Pair | None:
    """The pair an OK result adds to history (SKIP, ERROR and a refusal add none).
    ``source_event`` identifies the incoming event and step, as the processed-event record
    does."""
    if result.outcome != "OK" or result.candidate is None or not result.adds_pair:
        return None
    event = result.event
    return Pair(
        source_event=source_event,
        thread_id=thread_id_of(event),
        user_id=user_id_of(event),
        prompt=result.prompt,
        reply=result.candidate.text or "",
        at=now,
        writes=result.writes,
    )
