"""One event through the graph: the outcome (OK / SKIP / ERROR) and the updated event.

The input event is never modified; the result holds a copy with llm-bot's routing step closed,
the candidate appended (OK) or an ``errors[]`` entry recorded (ERROR), an ``errors[]`` entry for
each platform-tool call that failed (source ``mcp:<tool id>`` or ``internal``, as BitBrat's;
the event still completes OK), and the behaviour annotations BitBrat's llm-bot adds
(:mod:`llm_bot.graph.behavior_annotations`; on OK and SKIP).
Where it goes next is the transport's business (:func:`llm_bot.events.routing.advance`).

Outcomes: the model's reply (OK, a history pair); BitBrat's safe refusal (OK, no history
pair: see :mod:`llm_bot.graph.ingest_prompt`); an event the gate escalates or does not answer
(SKIP, no step error: the ``safety-decision`` annotation says why, as on the platform); an event
with no task (SKIP, step error ``NO_PROMPT``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llm_bot.clock import iso_timestamp
from llm_bot.errors import ForwardAsError
from llm_bot.events.models import (
    SOURCE,
    CandidateV1,
    ErrorEntryV1,
    InternalEventV2,
    Outcome,
    StepError,
)
from llm_bot.events.routing import complete_current_step
from llm_bot.graph.behavior_annotations import (
    gated_annotations,
    profile_annotation,
    strategy_annotation,
)
from llm_bot.graph.builder import LlmBotGraph
from llm_bot.graph.state import GraphContext
from llm_bot.graph.tools import ToolRecord
from llm_bot.llm.errors import ModelError
from llm_bot.memory.run_writes import RunWrites

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessResult:
    outcome: Outcome
    event: InternalEventV2
    candidate: CandidateV1 | None = None
    error: StepError | None = None
    writes: RunWrites | None = None  # what the commit must apply (OK only)
    prompt: str = ""  # the combined prompt, for the history pair
    adds_pair: bool = True  # False: the outcome keeps nothing of the message (a refusal)


# What the result is made of: LangGraph then reads these channels alone after each superstep
# instead of the whole state (~0.1 ms of CPU per event).
OUTPUT = ["candidate", "writes", "combined_prompt", "profile", "gate", "offer", "tool_records"]


async def process_event(
    graph: LlmBotGraph, context: GraphContext, event: InternalEventV2
) -> ProcessResult:
    working = event.model_copy(deep=True)
    try:
        # None when the run wrote none of them (an event without a prompt).
        final = await graph.ainvoke({"event": working}, context=context, output_keys=OUTPUT) or {}
    except ModelError as error:
        logger.warning(
            "model call failed",
            extra={
                "correlationId": event.correlation_id,
                "code": error.code,
                "cause": error.message,
            },
        )
        return record_failure(working, context, error)
    now = iso_timestamp(context.clock())
    annotate(working, context, final, now)
    record_tool_errors(working, final.get("tool_records", ()), now)
    gate = final.get("gate")
    candidate: CandidateV1 | None = final.get("candidate")
    if candidate is None:
        # A gated SKIP has no step error: its safety-decision annotation says why.
        complete_current_step(working, "SKIP", now, None if gate else no_prompt())
        return ProcessResult("SKIP", working)
    working.candidates = [*(working.candidates or []), candidate]
    complete_current_step(working, "OK", now)
    if gate != "PROCEED":
        return ProcessResult("OK", working, candidate, adds_pair=False)
    return ProcessResult(
        "OK", working, candidate, writes=final.get("writes"), prompt=final["combined_prompt"]
    )


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


def record_tool_errors(event: InternalEventV2, records: Iterable[ToolRecord], now: str) -> None:
    """BitBrat's entry for each platform-tool call that failed (processor.ts:795-803)."""
    entries = [
        ErrorEntryV1(source=record.error_source, message=record.message, at=now)
        for record in records
        if record.error_source is not None
    ]
    if entries:
        event.errors = [*(event.errors or []), *entries]


def record_failure(
    event: InternalEventV2, context: GraphContext, failure: ForwardAsError
) -> ProcessResult:
    """Close the step as ERROR with the failure's code and add an ``errors[]`` entry."""
    now = iso_timestamp(context.clock())
    code, message, retryable = failure.code, failure.message, failure.retryable
    error = StepError(code=code, message=message, retryable=retryable)
    entry = ErrorEntryV1(source=SOURCE, message=f"{code}: {message}", fatal=not retryable, at=now)
    event.errors = [*(event.errors or []), entry]
    complete_current_step(event, "ERROR", now, error)
    return ProcessResult("ERROR", event, error=error)
