"""Node ``tools``: run the calls of the model's last turn, then back to ``call_model``. Only the
tools offered to the model run (the behaviour profile may hold some back); a call to another
is answered as a call to an unknown tool."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.graph.tools import run_tool_calls


async def run_tools(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    context = runtime.context
    offered = context.offered_tools(state["profile"])
    results = await run_tool_calls(state["pending_calls"], offered, state["writes"])
    return {
        "messages": results,
        "pending_calls": (),
        "tool_rounds": state.get("tool_rounds", 0) + 1,
    }
