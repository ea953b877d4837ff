"""An explanation as shown: the one shape the reader (:mod:`llm_bot.explanation.reader`) fills
and every rendering reads: its JSON (:meth:`Explanation.as_json`, ``llm-bot explain --json``),
the terminal text (:mod:`llm_bot.explanation.render`) and the console's event page. It holds
the words read from their rows, where the stored record (:mod:`llm_bot.explanation.record`)
holds only ids, ranks, scores and hashes; a rendering needs it and none of the reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

State = Literal["shown", "changed", "erased"]
Message = Literal["system", "memory", "user"]


@dataclass(frozen=True)
class Part:
    """One part of the prompt as shown: which message it was in, its label, where it came
    from, why it was chosen, and its text read now (None when not shown: erased, changed, or
    a section whose text is not kept)."""

    message: Message
    label: str
    origin: str
    why: str
    state: State | None = None
    text: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "label": self.label,
            "origin": self.origin,
            "why": self.why,
            "state": self.state,
            "text": self.text,
        }


@dataclass(frozen=True)
class ToolCallShown:
    tool: str
    status: str
    ledger_key: str | None  # user/correlation id/step/index, as the tool ledger keys it
    ledger_state: str | None  # the ledger row's state now (None: not in the ledger)


@dataclass(frozen=True)
class Explanation:
    """An explanation as shown: the decision, the prompt's parts in order, what was left out
    (counts by reason), the words asked and the answer (read from the event's stored output),
    the tool calls."""

    correlation_id: str
    user_id: str
    thread_id: str | None
    at: datetime
    decision: Mapping[str, Any] | None
    parts: tuple[Part, ...]
    left_out: Mapping[str, int]
    failed: int
    answer: str | None
    tools: tuple[ToolCallShown, ...]

    def as_json(self) -> dict[str, Any]:
        """The explanation as JSON-able data, the one rendering ``llm-bot explain --json``
        prints."""
        return {
            "correlationId": self.correlation_id,
            "userId": self.user_id,
            "threadId": self.thread_id,
            "at": self.at.isoformat(),
            "decision": dict(self.decision) if self.decision is not None else None,
            "prompt": [part.as_json() for part in self.parts],
            "leftOut": dict(self.left_out),
            "retrievalFailed": self.failed,
            "answer": self.answer,
            "tools": [
                {
                    "tool": tool.tool,
                    "status": tool.status,
                    "ledgerKey": tool.ledger_key,
                    "ledgerState": tool.ledger_state,
                }
                for tool in self.tools
            ],
        }
