"""The runner that executes one round of the model's tool calls, of both kinds of tool.

Only the event's offer (:mod:`llm_bot.graph.offering`) runs; a call to any other name is
answered as a call to an unknown tool. The runner dispatches by kind:

- a **memory tool** (:class:`llm_bot.memory.tools.MemoryTool`) runs against the run's
  :class:`RunWrites` (with the user id) from the graph, never a user from the model's
  arguments, so a model cannot read or write another user's memory by naming them. Its writes
  apply at the event's commit, with the history pair, so a retried event repeats none of them;
- a **platform tool** (:class:`llm_bot.platform_tools.platform.PlatformTool`: a built-in or the
  gateway's) acts outside that transaction, so each call of one with side effects (a gateway
  tool not listed with ``readOnlyHint``) goes through the context's :class:`ToolLedger` under
  its :class:`CallKey` (the event, the step, the call's index among the run's platform-tool
  calls), which answers a retried event's call from its record; a read (the built-ins, a
  read-only gateway tool) is answered afresh and costs no record. It is made for the event's
  requesting user (the offer's :class:`Caller`), with the arguments that name a user, channel
  or destination set from the event (``PlatformTool.bind``), within ``timeout_s``.

A platform tool's result is data from outside: each NUL in it becomes U+FFFD (an ``errors[]``
entry quotes it, and an event holding a NUL is one llm-bot refuses at decode, as a jsonb column
downstream does), it is cut to ``LLM_BOT_TOOL_RESULT_MAX_CHARS`` with a visible marker before
the ledger stores it and the model reads it, and it reaches the model labelled as that tool's
output and fenced (:func:`llm_bot.llm.messages.sent_content`). A call
the run already made, same tool and same arguments once bound, is answered with the first
call's outcome and not sent again: a model that lost sight of a result, or was told by one to
call again, cannot make the server act twice for one event.

Every call is an ``execute_tool`` span and a ``llmbot_tool_calls`` count by tool and outcome.
A failing tool answers the model with an error text instead of failing the event: the model
can recover, the event cannot; a platform tool's failure is also recorded as an ``errors[]``
entry (:class:`ToolRecord`). Neither arguments nor results are logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Status, StatusCode

from llm_bot.events.limits import InvalidEvent, parse_json
from llm_bot.graph.offering import Offer
from llm_bot.llm.messages import ChatMessage, ToolCall
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.tools import MemoryTool
from llm_bot.platform_tools.calls import CallKey, ToolLedger, ToolOutcome
from llm_bot.platform_tools.platform import Caller, PlatformTool, ToolRequest, error_source
from llm_bot.telemetry import metrics
from llm_bot.telemetry.traces import tool_span
from llm_bot.text import capped, storable

logger = logging.getLogger(__name__)

# An errors[] entry quotes at most this much of a tool's error text: the event stays small.
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class ToolRecord:
    """One call that reached a tool: its id, whether it failed, for a failed platform
    tool the ``errors[]`` entry's source and message, and for a platform tool its index in the
    event's calls (the last part of its tool ledger key, which an explanation cites)."""

    tool: str
    outcome: str  # "ok" or "error"
    error_source: str | None = None
    message: str = ""
    ledger_index: int | None = None


@dataclass(frozen=True)
class TimeLimit:
    """A call's limit as it starts, and whether it is the whole ``LLM_BOT_TOOL_TIMEOUT_MS``."""

    seconds: float
    full: bool


@dataclass(frozen=True)
class PlatformCalls:
    """What a round's platform-tool calls share: the ledger, the event's key, each call's
    time limit (read as the call starts), the cap on a result, and the outcomes of the calls
    the run made so far (by :func:`call_identity`). ``first_index`` is the index of the round's
    first platform call in the run."""

    ledger: ToolLedger
    correlation_id: str
    step_key: str
    first_index: int
    time_limit: Callable[[], TimeLimit]
    result_max_chars: int
    answered: Mapping[str, ToolOutcome] = field(default_factory=dict)


@dataclass(frozen=True)
class Round:
    """A round's ``tool`` messages (one per call, in order), its records, how many
    platform-tool calls it made (the next round's ``first_index`` moves by it) and the
    outcomes of the calls it sent."""

    messages: list[ChatMessage]
    records: list[ToolRecord]
    platform_calls: int
    answered: dict[str, ToolOutcome] = field(default_factory=dict)


async def run_tool_calls(
    calls: Sequence[ToolCall], offer: Offer, run: RunWrites, platform: PlatformCalls
) -> Round:
    messages: list[ChatMessage] = []
    records: list[ToolRecord] = []
    answered: dict[str, ToolOutcome] = {}
    index = platform.first_index
    for call in calls:
        if call.name not in offer.memory and call.name not in offer.platform:
            messages.append(ChatMessage("tool", _unknown(call, offer), tool_call_id=call.id))
            continue
        seen = dataclasses.replace(platform, answered={**platform.answered, **answered})
        done, record = await _run_call(call, offer, run, seen, index)
        platform_tool = offer.platform.get(call.name)
        data_of = None
        if platform_tool is not None:
            index += 1  # every platform call the model asked for takes its index
            data_of = platform_tool.tool_id
            answered.update(done.sent)
        message = ChatMessage("tool", done.outcome.text, tool_call_id=call.id, data_of=data_of)
        messages.append(message)
        records.append(record)
    return Round(messages, records, index - platform.first_index, answered)


def call_identity(tool_id: str, arguments: Mapping[str, Any]) -> str:
    """A call of the run, by tool and bound arguments: two calls with one identity are one."""
    return tool_id + "\n" + json.dumps(arguments, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class _Ran:
    """A call's outcome, and the identity it was sent under with it (empty: a memory tool, or
    a platform call not sent: refused, or answered from the run's first)."""

    outcome: ToolOutcome
    sent: dict[str, ToolOutcome] = field(default_factory=dict)


async def _run_call(
    call: ToolCall, offer: Offer, run: RunWrites, platform: PlatformCalls, index: int
) -> tuple[_Ran, ToolRecord]:
    arguments = _arguments(call)
    platform_tool = offer.platform.get(call.name)
    tool_id = platform_tool.tool_id if platform_tool is not None else call.name
    ran = isinstance(arguments, dict)
    with tool_span(call.name, call.id) as span:
        if isinstance(arguments, str):
            done = _Ran(ToolOutcome(arguments, True))
        elif platform_tool is not None:
            key = CallKey(run.user_id, platform.correlation_id, platform.step_key, index)
            done = await _run_platform(platform_tool, arguments, offer.caller, key, platform)
            ran = bool(done.sent)  # a repeat's errors[] entry is its first call's
        else:
            done = _Ran(await _run_memory(offer.memory[call.name], arguments, run))
        outcome = done.outcome
        if outcome.is_error:
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", "tool_error")
    record = _record(tool_id, platform_tool, outcome, ran=ran)
    if platform_tool is not None:
        record = dataclasses.replace(record, ledger_index=index)
    metrics.tool_calls.add(1, {"tool": tool_id, "outcome": record.outcome})
    return done, record


async def _run_memory(tool: MemoryTool, arguments: dict[str, Any], run: RunWrites) -> ToolOutcome:
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
    tool: PlatformTool,
    arguments: dict[str, Any],
    caller: Caller,
    key: CallKey,
    platform: PlatformCalls,
) -> _Ran:
    bound = tool.bind(arguments, caller)
    if isinstance(bound, str):  # the event cannot say whom or where: not sent
        return _Ran(ToolOutcome(bound, True))
    identity = call_identity(tool.tool_id, bound)
    first = platform.answered.get(identity)
    if first is not None:
        _count_repeat(tool, key)
        return _Ran(first)
    limit = platform.time_limit()
    request = ToolRequest(caller, key, limit.seconds, limit.full)

    async def call() -> ToolOutcome:
        if request.timeout_s <= 0:
            return ToolOutcome(f"error: {tool.spec.name} was not called: no time left", True)
        try:
            outcome = await tool.call(bound, request)
        except Exception as error:  # a built-in's bug must never fail the event
            logger.warning(
                "tool failed", extra={"tool": tool.tool_id, "cause": type(error).__name__}
            )
            return ToolOutcome(f"error: {tool.spec.name} failed: {type(error).__name__}", True)
        text = capped(storable(outcome.text), platform.result_max_chars)
        return ToolOutcome(text, outcome.is_error)

    if tool.side_effects:
        outcome = await platform.ledger.once(key, tool.tool_id, bound, call)
    else:  # a read changes nothing a repeat could double: answered afresh, not recorded
        outcome = await call()
    if outcome.is_error:
        logger.warning(
            "tool call answered an error",
            extra={"tool": tool.tool_id, "correlationId": key.correlation_id},
        )
    return _Ran(outcome, {identity: outcome})


def _count_repeat(tool: PlatformTool, key: CallKey) -> None:
    metrics.tool_ledger.add(1, {"result": "repeated_in_run"})
    logger.info(
        "tool call repeated in one run: answered from the first",
        extra={"tool": tool.tool_id, "correlationId": key.correlation_id},
    )


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
    """The call's arguments, or the error text the model is answered with. Strict JSON, as
    an event's: ``NaN``, ``Infinity`` and numbers beyond a double are refused, never stored
    in ``tool_calls`` (Postgres' jsonb refuses them) or sent on."""
    try:
        arguments = parse_json(call.arguments or "{}")
    except json.JSONDecodeError as error:
        return f"error: arguments are not valid JSON ({error.msg})"
    except InvalidEvent as error:
        said = str(error).removeprefix("message body is not JSON: ")
        said = said.removeprefix("message body has ")
        return f"error: arguments are not valid JSON ({said})"
    except RecursionError:
        return "error: arguments are nested too deeply"
    if not isinstance(arguments, dict):
        return "error: arguments must be a JSON object"
    return arguments
