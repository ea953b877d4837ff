"""How long-term memories are shown to the model.

The block is one system message: ``Relevant memories:`` then one bullet per memory, best first,
as long as the running total stays within ``MEMORY_INJECTION_BUDGET`` tokens, then
``[...and N more memories]`` so the model knows there was more it could ask about.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm_bot.memory.search import MemoryHit
from llm_bot.memory.validation import approx_tokens

HEADER = "Relevant memories:"


def render_memories(
    hits: Sequence[MemoryHit], budget_tokens: int, total: int | None = None
) -> tuple[str, int]:
    """The injected text and how many memories it holds; ``total`` counts hits found in all
    (when the caller already left some out)."""
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
    more = (len(hits) if total is None else total) - shown
    if more > 0:
        lines.append(f"[...and {more} more memories]")
    return "\n".join(lines), shown
