"""Node ``build_candidate``: the model's final text as the platform's ``CandidateV1``."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from llm_bot.clock import iso_timestamp
from llm_bot.events.models import CandidateV1
from llm_bot.graph.composition import unwrap_quoted
from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.llm.errors import ModelError
from llm_bot.llm.messages import TokenUsage

CANDIDATE_PRIORITY = 10


class EmptyReply(ModelError):
    """The model answered with no text: there is nothing to propose, and retrying rarely helps."""

    code = "LLM_EMPTY_REPLY"


async def build_candidate(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    text = unwrap_quoted(state.get("llm_text", ""))
    if not text:
        raise EmptyReply("model returned an empty reply")
    usage = state.get("usage", TokenUsage())
    model = state.get("model_name", "unknown")
    recalled = state.get("recalled")
    candidate = CandidateV1(
        id=f"cand-{state['event'].correlation_id}",
        kind="text",
        source="llm-bot",
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
            "memory": dict(recalled.stats) if recalled else {},
        },
    )
    return {"candidate": candidate}
