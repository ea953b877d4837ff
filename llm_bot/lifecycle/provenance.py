"""What was derived from turns goes with them: a deletion of turns (an erasure, retention's
expiry or cap) names the turns it took (:data:`llm_bot.memory.turns.TAKEN`), and
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

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from llm_bot.memory import memories, turns, versions

# (table, statement): each deletes what was derived from the taken turns.
DERIVED: tuple[tuple[str, str], ...] = (
    ("conversation_turns", turns.SUMMARIES_OVER),
    ("memories", memories.DERIVED_FROM_TURNS),
    ("memory_versions", versions.DERIVED_FROM_TURNS),
)

Taken = tuple[str, str, int]  # a turn's user, thread and seq


async def forget_derived(
    connection: AsyncConnection[Any], taken: Sequence[Taken]
) -> dict[str, int]:
    """Delete, in the caller's transaction, what was derived from the ``taken`` turns; rows
    deleted per table. A summary's own row among them (seq < 0) is no source."""
    sources = [(user, thread, seq) for user, thread, seq in taken if seq > 0]
    if not sources:
        return {}
    users, threads, seqs = (list(column) for column in zip(*sources, strict=True))
    params = {"users": users, "threads": threads, "seqs": seqs}
    deleted = {}
    for table, statement in DERIVED:
        cursor = await connection.execute(statement, params)
        deleted[table] = cursor.rowcount
    return deleted


def added(into: dict[str, int], counts: dict[str, int]) -> None:
    """``counts`` added to ``into``, table by table."""
    for table, count in counts.items():
        into[table] = into.get(table, 0) + count
