"""Long-term memories as context: search before the model call, inject within a budget.

The block is one system message: ``Relevant memories:`` then one bullet per memory, best first,
as long as the running total stays within ``MEMORY_INJECTION_BUDGET`` tokens, then
``[...and N more memories]`` so the model knows there was more it could ask about.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.retrieval import RecalledContext
from llm_bot.memory.search import MemoryHit
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.validation import approx_tokens

HEADER = "Relevant memories:"
CANDIDATE_LIMIT = 50


def render_memories(hits: Sequence[MemoryHit], budget_tokens: int) -> tuple[str, int]:
    """The injected text and how many memories it holds."""
    lines = [HEADER]
    used = approx_tokens(HEADER)
    shown = 0
    for hit in hits:
        labels = "".join(f" ({name}: {value})" for name, value in sorted(hit.metadata.items()))
        line = f"- [{hit.key}] {hit.content}{labels}"
        cost = approx_tokens(line) + 1
        if used + cost > budget_tokens:
            break
        lines.append(line)
        used += cost
        shown += 1
    if shown < len(hits):
        lines.append(f"[...and {len(hits) - shown} more memories]")
    return "\n".join(lines), shown


class LongTermMemory:
    """The :class:`~llm_bot.memory.retrieval.MemoryRetriever` of semantic memories."""

    def __init__(self, memory: MemoryStore, threshold: float, budget_tokens: int) -> None:
        self._memory = memory
        self._threshold = threshold
        self._budget_tokens = budget_tokens

    async def retrieve(self, user_id: str, thread_id: str, query: str) -> RecalledContext:
        hits = await self._memory.for_user(user_id).search(
            query, limit=CANDIDATE_LIMIT, threshold=self._threshold
        )
        if not hits:
            return RecalledContext(stats={"memoriesFound": 0, "memoriesInjected": 0})
        text, shown = render_memories(hits, self._budget_tokens)
        stats = {"memoriesFound": len(hits), "memoriesInjected": shown}
        return RecalledContext((ChatMessage("system", text),), stats)
