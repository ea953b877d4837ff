"""The in-run working set: the bounded reducer over one run's chat messages.

One run (one event) appends prompts, model replies, tool calls and tool results. The reducer
keeps that set within ``LLM_BOT_MEMORY_MAX_CHARS`` and ``LLM_BOT_MEMORY_MAX_MESSAGES`` so a
model that loops or a huge prompt cannot grow the request without bound. Decided here, where
the seed design was silent:

- system messages are pinned: never trimmed, not counted against either limit;
- the newest user message is never dropped; if it alone exceeds the character limit it is
  truncated to fit, ending with a visible marker;
- a tool result whose tool call was trimmed is dropped too (the API rejects orphans).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from llm_bot.llm.messages import ChatMessage, Role

logger = logging.getLogger(__name__)

TRUNCATION_MARKER = "\n[...truncated]"


@dataclass(frozen=True)
class MessageLimits:
    max_messages: int = 8
    max_chars: int = 8000


def reduce_messages(
    existing: list[ChatMessage], new: list[ChatMessage], limits: MessageLimits
) -> list[ChatMessage]:
    """Append ``new`` to ``existing``, then trim the oldest per the module's rules."""
    merged = [*existing, *new]
    newest_user = _last_index(merged, "user")
    if newest_user is not None:
        merged[newest_user] = _fit(merged[newest_user], limits.max_chars)
    trimmable = [i for i, m in enumerate(merged) if m.role != "system" and i != newest_user]
    chars = sum(len(m.content) for m in merged if m.role != "system")
    dropped: set[int] = set()
    for index in trimmable:
        if chars <= limits.max_chars:
            break
        dropped.add(index)
        chars -= len(merged[index].content)
    by_chars = len(dropped)
    counted = sum(1 for m in merged if m.role != "system") - by_chars
    for index in trimmable:
        if counted <= limits.max_messages:
            break
        if index not in dropped:
            dropped.add(index)
            counted -= 1
    kept = _without_orphan_tool_results([m for i, m in enumerate(merged) if i not in dropped])
    logger.debug(
        "messages reduced",
        extra={
            "beforeCount": len(merged),
            "afterCount": len(kept),
            "trimmedByChars": by_chars,
            "trimmedByCount": len(merged) - len(kept) - by_chars,
        },
    )
    return kept


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


def _without_orphan_tool_results(messages: list[ChatMessage]) -> list[ChatMessage]:
    offered = {call.id for m in messages for call in m.tool_calls}
    return [m for m in messages if m.role != "tool" or m.tool_call_id in offered]
