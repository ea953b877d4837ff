"""What was derived from turns goes with them: a deletion of turns (an erasure, retention's
expiry or cap) names the turns it took (:class:`llm_bot.memory.turns.rows.Taken`), and
:func:`forget_derived`, in the same transaction, deletes every row made from any of them, in
whichever user's rows it lies:

- the session summaries whose window covered one: a shared channel's summary is written for
  each of its speakers and holds all their words, so one speaker's erasure takes it from every
  speaker's rows (it is not written again without them: a consolidation job writes a summary
  only while every turn of its window is there, :mod:`llm_bot.consolidation.derive`);
- the facts that cite one (memories, and their earlier texts in ``memory_versions``): a fact
  is only ever its speaker's own (:mod:`llm_bot.consolidation.grounding`), so it lies in the
  rows of the user whose turn went.

Explanations stay: they hold ids, ranks and hashes of what an answer was given, never the words
(:mod:`llm_bot.explanation.reader`), and show an erased source as erased.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from psycopg import AsyncConnection

from llm_bot.memory import memories, versions
from llm_bot.memory.turns.rows import Taken
from llm_bot.memory.turns.upkeep import delete_summaries_over


async def forget_derived(connection: AsyncConnection[Any], taken: Taken) -> Counter[str]:
    """Delete, in the caller's transaction, what was derived from the ``taken`` turns; rows
    deleted per table. A summary's own row among them is no source."""
    sources = taken.sources()
    if not sources:
        return Counter()
    return Counter(
        {
            "conversation_turns": await delete_summaries_over(connection, sources),
            "memories": await memories.delete_derived_from(connection, sources),
            "memory_versions": await versions.delete_derived_from(connection, sources),
        }
    )
