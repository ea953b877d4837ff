"""The in-run working set: the bounded reducer over one run's chat messages.

One run (one event) appends prompts, model replies, tool calls and tool results. The reducer
keeps that set within ``LLM_BOT_MEMORY_MAX_CHARS`` and ``LLM_BOT_MEMORY_MAX_MESSAGES`` so a
model that loops or a huge prompt cannot grow the request without bound. Its rules:

- system messages are pinned: never trimmed, not counted against either limit;
- the newest user message is never dropped; if it alone exceeds the character limit it is
  truncated to fit, ending with a visible marker;
- a model turn that called tools and the results answering it are one unit: counted as one
  message, kept or dropped together, and never dropped for its characters: over the character
  limit, its texts are shortened instead, the oldest first, each to no less than
  ``TOOL_RESULT_FLOOR`` characters, with a visible marker. Dropped, the turn would leave the
  model without what its tools answered, and it would ask for the same call again. Each
  platform tool's result is capped before it gets here (``LLM_BOT_TOOL_RESULT_MAX_CHARS``)
  and the rounds are bounded, so the set stays bounded: at most ``LLM_BOT_MAX_TOOL_ROUNDS``
  times ``LLM_BOT_MAX_TOOL_CALLS_PER_TURN`` floors past the limit. Only the count limit drops
  an older tool turn (when the rounds allowed outnumber it), never the newest;
- other messages are dropped, the oldest first, by either limit;
- a tool result whose tool call was trimmed is dropped too (the API rejects orphans).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from llm_bot.llm.messages import ChatMessage, Role
from llm_bot.text import capped

logger = logging.getLogger(__name__)

TRUNCATION_MARKER = "\n[...truncated]"
# What a shortened tool result keeps at least (its marker included).
TOOL_RESULT_FLOOR = 300


@dataclass(frozen=True)
class MessageLimits:
    """``LLM_BOT_MEMORY_MAX_MESSAGES`` and ``LLM_BOT_MEMORY_MAX_CHARS``."""

    max_messages: int
    max_chars: int


def reduce_messages(
    existing: list[ChatMessage], new: list[ChatMessage], limits: MessageLimits
) -> list[ChatMessage]:
    """Append ``new`` to ``existing``, then trim the oldest per the module's rules."""
    merged = [*existing, *new]
    newest_user = _last_index(merged, "user")
    if newest_user is not None:
        merged[newest_user] = _fit(merged[newest_user], limits.max_chars)
    units = _units(merged)
    chars = sum(len(m.content) for m in merged if m.role != "system")
    for index, message in enumerate(merged):
        if chars <= limits.max_chars:
            break
        if message.role == "tool" or message.tool_calls:
            shortened = _shortened(message, len(message.content) - (chars - limits.max_chars))
            chars -= len(message.content) - len(shortened.content)
            merged[index] = shortened
    tool_units = [unit for unit in units if merged[unit[0]].tool_calls]
    newest_tool = tool_units[-1] if tool_units else None
    count = len(units)
    dropped: set[int] = set()
    for unit in units:
        over_count = count > limits.max_messages
        if not over_count and chars <= limits.max_chars:
            break
        if unit is newest_tool or newest_user in unit or (unit in tool_units and not over_count):
            continue
        dropped.update(unit)
        chars -= sum(len(merged[index].content) for index in unit)
        count -= 1
    kept = _without_orphan_tool_results([m for i, m in enumerate(merged) if i not in dropped])
    logger.debug("messages reduced", extra={"beforeCount": len(merged), "afterCount": len(kept)})
    return kept


def _units(messages: list[ChatMessage]) -> list[list[int]]:
    """Indexes of the non-system messages, grouped as they are kept or dropped: a model turn
    that called tools together with the results that answer it, every other message alone.
    A turn's results are useless without it and it is invalid without them, and one turn may
    carry ``LLM_BOT_MAX_TOOL_CALLS_PER_TURN`` calls: counted one by one, they would push the
    turn itself out and the model would never see what its tools answered."""
    units: list[list[int]] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "system":
            continue
        if message.role == "tool" and message.tool_call_id in open_calls:
            units[-1].append(index)
            continue
        open_calls = {call.id for call in message.tool_calls}
        units.append([index])
    return units


def _last_index(messages: list[ChatMessage], role: Role) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == role:
            return index
    return None


def _fit(message: ChatMessage, max_chars: int) -> ChatMessage:
    if len(message.content) <= max_chars:
        return message
    keep = max(0, max_chars - len(TRUNCATION_MARKER))
    marker = TRUNCATION_MARKER[: max_chars - keep]
    return ChatMessage(message.role, message.content[:keep] + marker)


def _shortened(message: ChatMessage, max_chars: int) -> ChatMessage:
    """A tool result cut to ``max_chars``, never below the floor (left as it is when shorter)."""
    cut = capped(message.content, max(max_chars, TOOL_RESULT_FLOOR))
    return dataclasses.replace(message, content=cut) if cut != message.content else message


def _without_orphan_tool_results(messages: list[ChatMessage]) -> list[ChatMessage]:
    offered = {call.id for m in messages for call in m.tool_calls}
    return [m for m in messages if m.role != "tool" or m.tool_call_id in offered]
