"""Tools the model may call, and the runner that executes one round of calls.

Tools receive the run's :class:`RunWrites` (with the user id) from the graph, never the user
from the model's arguments, so a model cannot read or write another user's memory by naming
them. A failing tool answers the model with an error text instead of failing the event: the
model can recover, the event cannot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from llm_bot.llm.messages import ChatMessage, ToolCall
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.tools import Tool

logger = logging.getLogger(__name__)


async def run_tool_calls(
    calls: Sequence[ToolCall], tools: Sequence[Tool], run: RunWrites
) -> list[ChatMessage]:
    """Execute each call in order; one ``tool`` message per call, errors included."""
    by_name = {tool.spec.name: tool for tool in tools}
    results = []
    for call in calls:
        results.append(
            ChatMessage("tool", await _run_one(call, by_name, run), tool_call_id=call.id)
        )
    return results


async def _run_one(call: ToolCall, tools: dict[str, Tool], run: RunWrites) -> str:
    tool = tools.get(call.name)
    if tool is None:
        return (
            f"error: no tool named {call.name!r}; available: {', '.join(sorted(tools)) or 'none'}"
        )
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as error:
        return f"error: arguments are not valid JSON ({error.msg})"
    if not isinstance(arguments, dict):
        return "error: arguments must be a JSON object"
    try:
        return await tool.run(arguments, run)
    except Exception as error:  # a tool failure must never fail the event
        logger.warning(
            "tool failed", extra={"tool": call.name, "userId": run.user_id, "cause": repr(error)}
        )
        return f"error: {call.name} failed: {type(error).__name__}: {error}"
