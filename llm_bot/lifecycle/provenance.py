"""What was derived from turns goes with them: a deletion of turns (an erasure, retention's
expiry or cap) names the turns it took (:data:`llm_bot.memory.turns.rows.TAKEN`), and
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
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from llm_bot.memory import memories, versions
from llm_bot.memory.turns.rows import Taken
from llm_bot.memory.turns.upkeep import delete_summaries_over


async def forget_derived(
    connection: AsyncConnection[Any], taken: Sequence[tuple[str, str, int]]
) -> Counter[str]:
    """Delete, in the caller's transaction, what was derived from the ``taken`` turns (user,
    thread, seq); rows deleted per table. A summary's own row among them (seq < 0) is no
    source."""
    sources = [(user, thread, seq) for user, thread, seq in taken if seq > 0]
    if not sources:
        return Counter()
    users, threads, seqs = (list(column) for column in zip(*sources, strict=True))
    turns_taken = Taken(users, threads, seqs)
    return Counter(
        {
            "conversation_turns": await delete_summaries_over(connection, turns_taken),
            "memories": await memories.delete_derived_from(connection, turns_taken),
            "memory_versions": await versions.delete_derived_from(connection, turns_taken),
        }
    )
