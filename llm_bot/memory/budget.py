"""What of the memory context fits its token budgets, pure.

A prompt has room for so much of the past, and the parts compete for it: the budgets and the
choices within them are tuned against the retrieval evaluation (docs/eval-retrieval.md) apart
from how the parts are read or worded, and are tested without a database. Memories fill at
most ``MEMORY_INJECTION_BUDGET`` tokens and half of the two budgets together
(:func:`memory_share`), the most similar first (:func:`memories_within`);
recalled messages ``MEMORY_RECALL_BUDGET`` and what the memories left of theirs
(:func:`select_recalled`, assembled by :func:`llm_bot.memory.context.assemble`), the best
first; the window keeps its newest pairs (:func:`newest_pairs_within`). A memory or a recalled
message costs the tokens of its line as :mod:`llm_bot.memory.long_term` or
:mod:`llm_bot.memory.rendering` writes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date

from llm_bot.memory.derived import derived_from
from llm_bot.memory.long_term import HEADER, memory_cost
from llm_bot.memory.recall import RecalledTurn
from llm_bot.memory.rendering import RECALL_HEADER, day_line, recall_block, recall_line
from llm_bot.memory.search import MemoryHit
from llm_bot.memory.turns.window import Turn
from llm_bot.memory.validation import approx_tokens

# How many of the user's memories a question ranks (and counts, of those it may not show).
MEMORY_CANDIDATES = 50
# Recall ranks ``budget // TOKENS_PER_CANDIDATE`` turns for a recall section of ``budget`` tokens
# (a chat line with its time and role is ~30 tokens), at least MIN_RECALL_CANDIDATES.
TOKENS_PER_CANDIDATE = 30
MIN_RECALL_CANDIDATES = 5
# The recall section looks through this many times the candidates its budget is sized for
# (recall_candidates), best first: room for short turns, duplicates and the long turns it
# passes over, and a bound on its work however many candidates recall found.
SCAN_FACTOR = 2


def newest_pairs_within(window: list[Turn], budget: int) -> list[Turn]:
    kept: list[Turn] = []
    used = 0
    for start in range(len(window) - 2, -1, -2):
        pair = window[start : start + 2]
        cost = sum(approx_tokens(turn.content) for turn in pair)
        if used + cost > budget:
            break
        kept[:0] = pair
        used += cost
    return kept


def cited_turns(memories: Iterable[MemoryHit]) -> set[tuple[str, int]]:
    """The turns ``memories`` derived from them cite (:mod:`llm_bot.memory.derived`)."""
    return {
        (source.thread_id, seq)
        for hit in memories
        if (source := derived_from(hit.metadata)) is not None
        for seq in source.source_seqs
    }


def memories_within(memories: list[MemoryHit], budget: int) -> tuple[list[MemoryHit], int]:
    """The most similar memories until ``budget`` is spent by their block, header and lines as
    :mod:`llm_bot.memory.long_term` renders them, so every memory chosen is shown (a long one
    that does not fit leaves room for shorter ones after it), and the tokens they spent (0:
    none chosen, no block)."""
    chosen: list[MemoryHit] = []
    used = approx_tokens(HEADER)
    for hit in sorted(memories, key=lambda hit: -hit.similarity):
        cost = memory_cost(hit)
        if used + cost <= budget:
            chosen.append(hit)
            used += cost
    return chosen, used if chosen else 0


def memory_share(memory_budget: int, shared_tokens: int, *, recalled: bool) -> int:
    """The most of ``shared_tokens`` (the two sections' budgets, within the room the notes and
    window leave) the memories may spend: their own ``memory_budget``, and no more than half
    while recalled turns wait for the rest. Taken first and whole, a full memory budget would
    crowd out the best recalled turns whenever the recall budget is the smaller; the top of
    each ranking holds more evidence than the tail of either (docs/eval-retrieval.md, "A
    model's facts and summaries"). What the memories leave, recall takes."""
    return min(memory_budget, shared_tokens // 2 if recalled else shared_tokens)


@dataclass(frozen=True)
class RecallSelection:
    """The recalled turns given to the model, in time order, the recall section that shows
    them, and the candidates left out, counted by reason (``duplicate``: the words of a turn
    already given; ``over_budget``: no room left)."""

    turns: list[RecalledTurn]
    text: str
    left_out: dict[str, int]


def select_recalled(
    candidates: list[RecalledTurn],
    budget: int,
    cited: Collection[tuple[str, int]] = (),
) -> RecallSelection:
    """Recall's candidates, best first, taken until ``budget`` tokens of the recall section
    are spent: a turn whose words were already given is left out (a question asked twice, a
    greeting; a turn ``cited`` by a memory the context shows, whose fact is given there), a
    turn too long for what is left gives way to shorter ones after it. The section
    is sized by tokens rather than turns because turns range from "ok" to a paragraph: a count
    of turns either wastes the budget or overruns it, so short turns fill it with more of them.
    Candidates past ``SCAN_FACTOR`` times :func:`recall_candidates` are not looked at: over
    budget."""
    chosen: list[RecalledTurn] = []
    given: set[str] = set()
    days: set[tuple[str, date]] = set()
    left_out = {"duplicate": 0, "over_budget": 0}
    used = approx_tokens(RECALL_HEADER)
    scanned = SCAN_FACTOR * recall_candidates(budget)
    left_out["over_budget"] = max(0, len(candidates) - scanned)
    for turn in candidates[:scanned]:
        words = " ".join(turn.content.casefold().split())
        if words in given or (turn.thread_id, turn.seq) in cited:
            left_out["duplicate"] += 1
            continue
        day = (turn.thread_id, turn.created_at.date())
        cost = approx_tokens(recall_line(turn)) + (
            0 if day in days else approx_tokens(day_line(turn.created_at))
        )
        if used + cost > budget:
            left_out["over_budget"] += 1
            continue
        chosen.append(turn)
        given.add(words)
        days.add(day)
        used += cost
    chosen = in_time_by_day(chosen)
    return RecallSelection(chosen, recall_block(chosen) if chosen else "", left_out)


def in_time_by_day(turns: list[RecalledTurn]) -> list[RecalledTurn]:
    """``turns`` in time order, except that a conversation's turns of one day stay together
    (under one day line) where two conversations of that day interleave: the groups in the
    order of their first turn."""
    groups: dict[tuple[str, date], list[RecalledTurn]] = {}
    for turn in sorted(turns, key=lambda turn: (turn.created_at, turn.thread_id, turn.seq)):
        groups.setdefault((turn.thread_id, turn.created_at.date()), []).append(turn)
    return [turn for group in groups.values() for turn in group]


def recall_candidates(budget: int) -> int:
    """How many turns recall ranks for a recall section of ``budget`` tokens: enough short
    turns to fill it, with room for the duplicates and long turns left out."""
    return max(MIN_RECALL_CANDIDATES, budget // TOKENS_PER_CANDIDATE)
