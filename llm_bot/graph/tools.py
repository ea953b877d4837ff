"""The runner that executes one round of the model's tool calls, of both kinds of tool.

Only the event's offer (:mod:`llm_bot.graph.offering`) runs; a call to any other name is
answered as a call to an unknown tool. The runner dispatches by kind:

- a **memory tool** (:class:`llm_bot.memory.tools.Tool`) runs against the run's
  :class:`RunWrites` (with the user id) from the graph, never a user from the model's
  arguments, so a model cannot read or write another user's memory by naming them. Its writes
  apply at the event's commit, with the history pair, so a retried event repeats none of them;
- a **platform tool** (:class:`llm_bot.tools.platform.PlatformTool`: a built-in or the
  gateway's) acts outside that transaction, so each call of one with side effects (a gateway
  tool not listed with ``readOnlyHint``) goes through the context's :class:`ToolLedger` under
  its :class:`CallKey` (the event, the step, the call's index among the run's platform-tool
  calls), which answers a retried event's call from its record; a read (the built-ins, a
  read-only gateway tool) is answered afresh and costs no record. It is made for the event's
  requesting user (the offer's :class:`Caller`) within ``timeout_s``.

Every call is an ``execute_tool`` span and a ``llmbot_tool_calls`` count by tool and outcome.
A failing tool answers the model with an error text instead of failing the event: the model
can recover, the event cannot; a platform tool's failure is also recorded as an ``errors[]``
entry (:class:`ToolRecord`). Neither arguments nor results are logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Status, StatusCode

from llm_bot.graph.offering import Offer
from llm_bot.llm.messages import ChatMessage, ToolCall
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.tools import Tool
from llm_bot.telemetry import metrics
from llm_bot.telemetry.traces import tool_span
from llm_bot.tools.calls import CallKey, ToolLedger, ToolOutcome
from llm_bot.tools.platform import PlatformTool, ToolRequest, error_source

logger = logging.getLogger(__name__)

# An errors[] entry quotes at most this much of a tool's error text: the event stays small.
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class ToolRecord:
    """One call that reached a tool: its id, whether it failed, and for a failed platform
    tool the ``errors[]`` entry's source and message."""

    tool: str
    outcome: str  # "ok" or "error"
    error_source: str | None = None
    message: str = ""


@dataclass(frozen=True)
class PlatformCalls:
    """What a round's platform-tool calls share: the ledger, the event's key and each call's
    time limit, read as the call starts. ``first_index`` is the index of the round's first
    platform call in the run."""

    ledger: ToolLedger
    correlation_id: str
    step_key: str
    first_index: int
    time_limit: Callable[[], float]


@dataclass(frozen=True)
class Round:
    """A round's ``tool`` messages (one per call, in order), its records, and how many
    platform-tool calls it made (the next round's ``first_index`` moves by it)."""

    messages: list[ChatMessage]
    records: list[ToolRecord]
    platform_calls: int


async def run_tool_calls(
    calls: Sequence[ToolCall], offer: Offer, run: RunWrites, platform: PlatformCalls
) -> Round:
    messages: list[ChatMessage] = []
    records: list[ToolRecord] = []
    index = platform.first_index
    for call in calls:
        if call.name not in offer.memory and call.name not in offer.platform:
            messages.append(ChatMessage("tool", _unknown(call, offer), tool_call_id=call.id))
            continue
        outcome, record = await _run_call(call, offer, run, platform, index)
        if call.name in offer.platform:
            index += 1  # every platform call the model asked for takes its index
        messages.append(ChatMessage("tool", outcome.text, tool_call_id=call.id))
        records.append(record)
    return Round(messages, records, index - platform.first_index)


async def _run_call(
    call: ToolCall, offer: Offer, run: RunWrites, platform: PlatformCalls, index: int
) -> tuple[ToolOutcome, ToolRecord]:
    arguments = _arguments(call)
    platform_tool = offer.platform.get(call.name)
    tool_id = platform_tool.tool_id if platform_tool is not None else call.name
    with tool_span(call.name, call.id) as span:
        if isinstance(arguments, str):
            outcome = ToolOutcome(arguments, True)
        elif platform_tool is not None:
            key = CallKey(run.user_id, platform.correlation_id, platform.step_key, index)
            request = ToolRequest(offer.caller, key, platform.time_limit())
            outcome = await _run_platform(platform_tool, arguments, request, platform.ledger)
        else:
            outcome = await _run_memory(offer.memory[call.name], arguments, run)
        if outcome.is_error:
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", "tool_error")
    record = _record(tool_id, platform_tool, outcome, ran=isinstance(arguments, dict))
    metrics.tool_calls.add(1, {"tool": tool_id, "outcome": record.outcome})
    return outcome, record


async def _run_memory(tool: Tool, arguments: dict[str, Any], run: RunWrites) -> ToolOutcome:
    name = tool.spec.name
    try:
        text = await tool.run(arguments, run)
    except Exception as error:  # a tool failure must never fail the event
        logger.warning(
            "tool failed", extra={"tool": name, "userId": run.user_id, "cause": repr(error)}
        )
        return ToolOutcome(f"error: {name} failed: {type(error).__name__}: {error}", True)
    return ToolOutcome(text, text.startswith("error:"))


async def _run_platform(
    tool: PlatformTool, arguments: dict[str, Any], request: ToolRequest, ledger: ToolLedger
) -> ToolOutcome:
    async def call() -> ToolOutcome:
        try:
            return await tool.call(arguments, request)
        except Exception as error:  # a built-in's bug must never fail the event
            logger.warning(
                "tool failed", extra={"tool": tool.tool_id, "cause": type(error).__name__}
            )
            return ToolOutcome(f"error: {tool.spec.name} failed: {type(error).__name__}", True)

    if tool.side_effects:
        outcome = await ledger.once(request.key, tool.tool_id, arguments, call)
    else:  # a read changes nothing a repeat could double: answered afresh, not recorded
        outcome = await call()
    if outcome.is_error:
        logger.warning(
            "tool call answered an error",
            extra={"tool": tool.tool_id, "correlationId": request.key.correlation_id},
        )
    return outcome


def _record(
    tool_id: str, platform_tool: PlatformTool | None, outcome: ToolOutcome, ran: bool
) -> ToolRecord:
    """A failed platform call that ran (arguments the model got wrong are its own error, never
    sent, as BitBrat's SDK refuses them before the tool) gives an ``errors[]`` entry."""
    if not outcome.is_error:
        return ToolRecord(tool_id, "ok")
    if platform_tool is None or not ran:
        return ToolRecord(tool_id, "error")
    message = outcome.text.removeprefix("error: ")[:MAX_ERROR_CHARS]
    return ToolRecord(tool_id, "error", error_source(platform_tool), message)


def _unknown(call: ToolCall, offer: Offer) -> str:
    available = ", ".join(sorted(offer.names)) or "none"
    return f"error: no tool named {call.name!r}; available: {available}"


def _arguments(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments, or the error text the model is answered with."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as error:
        return f"error: arguments are not valid JSON ({error.msg})"
    if not isinstance(arguments, dict):
        return "error: arguments must be a JSON object"
    return arguments
