"""One event answered: the graph run within the event's deadline, the outcome it ends in (OK,
SKIP or ERROR) with the event as it goes on, the pair it adds to history, and the memory writes
that make that pair durable.

The worker (:mod:`llm_bot.transport.handler`), ``llm-bot send --local`` and the tests answer
events here alone, so they cannot drift apart: one deadline, one place where a failure becomes
an ERROR step, one pair. Claiming the event, storing and publishing the output and acking are
the transport's: the worker applies :meth:`Answerer.prepare`'s writes inside the transaction
that stores the output, ``send --local`` commits them alone (:meth:`Answerer.commit`).

The event received is never modified; the answer holds a copy with llm-bot's routing step
closed, the candidate appended (OK) or an ``errors[]`` entry recorded (ERROR), an ``errors[]``
entry for each platform-tool call that failed (source ``mcp:<tool id>`` or ``internal``, as
BitBrat's; the event still completes OK), and the behaviour annotations BitBrat's llm-bot adds
(:mod:`llm_bot.graph.behavior.annotations`; on OK and SKIP). Where it goes next is the
transport's business (:func:`llm_bot.events.routing.advance`).

Outcomes: the model's reply (OK, a history pair); BitBrat's safe refusal (OK, no history
pair: see :mod:`llm_bot.graph.nodes.ingest_prompt`); an event the gate escalates or does not answer
(SKIP, no step error: the ``safety-decision`` annotation says why, as on the platform); an event
with no task (SKIP, step error ``NO_PROMPT``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from psycopg import AsyncConnection

from llm_bot.clock import iso_timestamp
from llm_bot.db.batches import LockKey
from llm_bot.db.embedding_space import EmbeddingSpace
from llm_bot.errors import ForwardAsError
from llm_bot.events.codec import copy_of
from llm_bot.events.inbound import Inbound
from llm_bot.events.models import (
    SOURCE,
    CandidateV1,
    ErrorEntryV1,
    InternalEventV2,
    Outcome,
    StepError,
)
from llm_bot.events.routing import complete_current_step
from llm_bot.explanation.record import Record, ToolSource, text_hash
from llm_bot.graph.behavior.annotations import (
    gated_annotations,
    profile_annotation,
    strategy_annotation,
)
from llm_bot.graph.builder import LlmBotGraph
from llm_bot.graph.state import GraphContext
from llm_bot.graph.tool_round import ToolRecord
from llm_bot.llm.errors import ModelError
from llm_bot.memory.commit import MemoryCommit, Pair

logger = logging.getLogger(__name__)

# What the answer is made of: LangGraph then reads these channels alone after each superstep
# instead of the whole state (~0.1 ms of CPU per event).
OUTPUT = [
    "candidate",
    "writes",
    "combined_prompt",
    "profile",
    "gate",
    "offer",
    "tool_records",
    "explanation",
]


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
    """How the step closed, the event as it goes on, and the pair it adds to history: ``None``
    for SKIP, ERROR and a refusal, which keep nothing of the message."""

    outcome: Outcome
    event: InternalEventV2
    candidate: CandidateV1 | None = None
    error: StepError | None = None
    pair: Pair | None = None
    explanation: Record | None = None  # what reached the model and why (OK and gated SKIP)


# Writes inside the caller's transaction, given the embedding space read under its write
# guard earlier in that transaction (:func:`llm_bot.db.processed_events.store_output`).
ApplyWrites = Callable[[AsyncConnection[Any], EmbeddingSpace | None], Awaitable[None]]


@dataclass(frozen=True)
class Writes:
    """An answer's memory writes with their embeddings made, which the answer cannot hold:
    they exist only once :meth:`Answerer.prepare` has embedded the pair, outside the graph run.
    ``apply`` runs inside the caller's transaction and touches what ``keys`` name (the group
    committer orders works by them)."""

    apply: ApplyWrites
    keys: tuple[LockKey, ...] = ()


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

    async def answer(self, inbound: Inbound, *, context: GraphContext | None = None) -> Answer:
        """``inbound``'s event answered. ``context`` replaces the answerer's for this event (the
        worker's arms its progress message); past ``inbound.deadline_s`` the step is ERROR
        ``TIMEOUT``. Every failure ends as an ERROR step (:class:`ForwardAsError`)."""
        context = context or self.context
        deadline_s = inbound.deadline_s
        scope = asyncio.timeout(deadline_s)
        if deadline_s is not None:  # the graph's tool calls keep within it (GraphContext.deadline)
            context = replace(context, deadline=asyncio.get_running_loop().time() + deadline_s)
        failure: ForwardAsError
        try:
            async with scope:
                return await self._run(inbound, context)
        except ModelError as error:
            logger.warning(
                "model call failed",
                extra={
                    "correlationId": inbound.key.correlation_id,
                    "code": error.code,
                    "cause": error.message,
                },
            )
            failure = error
        except TimeoutError:
            if deadline_s is None or not scope.expired():
                raise
            failure = DeadlineExceeded(f"no result within {deadline_s * 1000:.0f} ms")
        except Exception:
            logger.exception("graph failed", extra={"correlationId": inbound.key.correlation_id})
            failure = InternalFailure("llm-bot failed unexpectedly")
        # A fresh copy: the graph's may be half-way through its changes.
        return failed(copy_of(inbound.event), context, failure)

    async def _run(self, inbound: Inbound, context: GraphContext) -> Answer:
        working = copy_of(inbound.event)
        state = {"event": working, "inbound": inbound}
        # None when the run wrote none of the outputs (an event without a prompt).
        final = await self._graph.ainvoke(state, context=context, output_keys=OUTPUT) or {}
        now = iso_timestamp(context.clock())
        annotate(working, context, final, now)
        record_tool_errors(working, final.get("tool_records", ()), now)
        gate = final.get("gate")
        candidate: CandidateV1 | None = final.get("candidate")
        explanation = explained(final, candidate)
        if candidate is None:
            # A gated SKIP has no step error: its safety-decision annotation says why.
            complete_current_step(working, "SKIP", now, None if gate else no_prompt())
            return Answer("SKIP", working, explanation=explanation)
        working.candidates = [*(working.candidates or []), candidate]
        complete_current_step(working, "OK", now)
        if gate != "PROCEED":  # a refusal keeps nothing of the message
            return Answer("OK", working, candidate, explanation=explanation)
        pair = Pair(
            source_event=inbound.key.source,
            thread_id=inbound.thread_id,
            user_id=inbound.user_id,
            prompt=final["combined_prompt"],
            reply=candidate.text or "",
            at=context.clock(),
            writes=final.get("writes"),
        )
        return Answer("OK", working, candidate, pair=pair, explanation=explanation)

    async def prepare(self, answer: Answer) -> Writes:
        """The memory writes of ``answer``, with every embedding they need made now, outside
        any transaction (an embedding inside one would hold the whole group commit)."""
        memory, pair = self._memory, answer.pair
        if memory is None or pair is None:
            return NO_WRITES
        prepared = await memory.prepare(pair)

        async def apply(connection: AsyncConnection[Any], space: EmbeddingSpace | None) -> None:
            await memory.apply(connection, pair, prepared, space)

        return Writes(apply, memory.lock_keys(pair))

    async def commit(self, answer: Answer) -> None:
        """The memory writes of ``answer`` in a transaction of their own."""
        if self._memory is not None and answer.pair is not None:
            await self._memory.commit_now(answer.pair)


def no_prompt() -> StepError:
    return StepError(
        code="NO_PROMPT", message="event has no prompt or instruction annotation", retryable=False
    )


def annotate(
    event: InternalEventV2, context: GraphContext, final: Mapping[str, Any], now: str
) -> None:
    """Append the run's behaviour annotations, as BitBrat orders them."""
    profile = final.get("profile")
    if profile is None:
        return
    added = [profile_annotation(profile, now)]
    gate = final.get("gate")
    if gate == "PROCEED":
        offer = final.get("offer") or context.offer(event, profile)
        added.append(strategy_annotation(profile, offer.use, now))
    elif gate is not None:
        added += gated_annotations(profile, gate, now)
    event.annotations = [*(event.annotations or []), *added]


def explained(final: Mapping[str, Any], candidate: CandidateV1 | None) -> Record | None:
    """The run's explanation completed with its tool calls and the answer's hash (None when
    explanations are off or the run stopped before its behaviour decision)."""
    record: Record | None = final.get("explanation")
    if record is None:
        return None
    tools = tuple(
        ToolSource(each.tool, "error" if each.outcome == "error" else "ok", each.ledger_index)
        for each in final.get("tool_records", ())
    )
    answer = None if candidate is None or candidate.text is None else text_hash(candidate.text)
    return replace(record, tools=tools, answer_hash=answer)


def record_tool_errors(event: InternalEventV2, records: Iterable[ToolRecord], now: str) -> None:
    """BitBrat's entry for each platform-tool call that failed (processor.ts:795-803)."""
    entries = [
        ErrorEntryV1(source=record.error_source, message=record.message, at=now)
        for record in records
        if record.error_source is not None
    ]
    if entries:
        event.errors = [*(event.errors or []), *entries]


def failed(event: InternalEventV2, context: GraphContext, failure: ForwardAsError) -> Answer:
    """Close the step as ERROR with the failure's code and add an ``errors[]`` entry."""
    now = iso_timestamp(context.clock())
    code, message, retryable = failure.code, failure.message, failure.retryable
    error = StepError(code=code, message=message, retryable=retryable)
    entry = ErrorEntryV1(source=SOURCE, message=f"{code}: {message}", fatal=not retryable, at=now)
    event.errors = [*(event.errors or []), entry]
    complete_current_step(event, "ERROR", now, error)
    return Answer("ERROR", event, error=error)
