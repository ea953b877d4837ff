"""Node ``tools``: run the calls of the model's last turn with the event's offer, then back to
``call_model`` (:mod:`llm_bot.graph.tool_round` says how each kind of tool runs). A platform-tool
call gets ``LLM_BOT_TOOL_TIMEOUT_MS``, at most half the time left before the event's deadline;
its key names the event's routing step as the processed-events record does."""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.graph.tool_round import PlatformCalls, run_tool_calls


async def run_tools(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    context = runtime.context
    event_key = state["inbound"].key
    platform = PlatformCalls(
        ledger=context.ledger,
        correlation_id=event_key.correlation_id,
        step_key=event_key.step,
        first_index=state.get("platform_calls", 0),
        time_limit=lambda: context.tool_timeout(asyncio.get_running_loop().time()),
        result_max_chars=context.tool_result_max_chars,
        answered=state.get("tool_answers", {}),
    )
    done = await run_tool_calls(state["pending_calls"], state["offer"], state["writes"], platform)
    return {
        "messages": done.messages,
        "pending_calls": (),
        "tool_rounds": state.get("tool_rounds", 0) + 1,
        "platform_calls": platform.first_index + done.platform_calls,
        "tool_records": done.records,
        "tool_answers": done.answered,
    }
