"""Node ``build_candidate``: the model's final text as the platform's ``CandidateV1``; and the
canned safe refusal that stands for the model's reply when the behaviour gate refuses
(:mod:`llm_bot.graph.nodes.ingest_prompt`), with BitBrat's id, priority and reason."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from llm_bot.clock import iso_timestamp
from llm_bot.events.models import SOURCE, CandidateV1, InternalEventV2
from llm_bot.graph.behavior.annotations import summary
from llm_bot.graph.behavior.profile import Profile
from llm_bot.graph.behavior.texts import safe_refusal_text
from llm_bot.graph.prompt.composition import unwrap_quoted
from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.llm.errors import ModelError
from llm_bot.llm.messages import TokenUsage

CANDIDATE_PRIORITY = 10
REFUSAL_PRIORITY = 5  # BitBrat's: lower wins, so the refusal beats a model reply
REFUSAL_REASON = "behavior:safe-refusal"


class EmptyReply(ModelError):
    """The model answered with no text: there is nothing to propose, and retrying rarely helps."""

    code = "LLM_EMPTY_REPLY"


async def build_candidate(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    text = unwrap_quoted(state.get("llm_text", ""))
    if not text:
        raise EmptyReply("model returned an empty reply")
    usage = state.get("usage", TokenUsage())
    model = state.get("model_name", "unknown")
    memory_context = state.get("memory_context")
    candidate = CandidateV1(
        id=f"cand-{state['event'].correlation_id}",
        kind="text",
        source=SOURCE,
        created_at=iso_timestamp(runtime.context.clock()),
        status="proposed",
        priority=CANDIDATE_PRIORITY,
        text=text,
        format="plain",
        reason=f"model:{model}",
        metadata={
            "model": model,
            "usage": {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "totalTokens": usage.input_tokens + usage.output_tokens,
            },
            "toolRounds": state.get("tool_rounds", 0),
            # Each tool call's id and outcome, in order: never its arguments or result.
            "tools": [
                {"tool": record.tool, "outcome": record.outcome}
                for record in state.get("tool_records", ())
            ],
            "memory": dict(memory_context.stats) if memory_context else {},
            "behaviorProfile": summary(state["profile"]),
        },
    )
    return {"candidate": candidate}


def refusal_candidate(event: InternalEventV2, profile: Profile, now: str) -> CandidateV1:
    """BitBrat's safe-refusal candidate, field for field (it sets no ``format``)."""
    return CandidateV1(
        id=f"cand-{event.correlation_id}-safe-refusal",
        kind="text",
        source=SOURCE,
        created_at=now,
        status="proposed",
        priority=REFUSAL_PRIORITY,
        text=safe_refusal_text(profile),
        reason=REFUSAL_REASON,
        metadata={"behaviorProfile": summary(profile)},
    )
