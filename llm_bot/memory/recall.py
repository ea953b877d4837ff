"""Recall over history: this user's older messages, from any thread, that bear on the prompt.

One SQL statement over ``conversation_turns`` of one user
(:func:`llm_bot.memory.turns.recall.candidates`) only finds the candidates: the nearest turns by
embedding, and the best turns by BM25 over their full-text vectors, each side ``pool`` deep,
then the turns around those (``NEIGHBOUR_REACH`` either side in the thread) and, for a
session's summary among them, the turns it covers nearest the question.
The same statement reads which of them consolidation recorded as corrected: a turn that only an
earlier text of a derived memory cites (:mod:`llm_bot.memory.versions`), with the turns that
memory's current text cites, which come with it as candidates. Python trades a corrected turn's
scores with those of the later of those turns the caller may see, then fuses the two scores of
every candidate (:mod:`llm_bot.memory.fusion`) and prefers
turns written in a month or year the question names, or on the days its relative dates name
("yesterday", "last week", "two months ago") from when it was asked
(:mod:`llm_bot.memory.dates`). Words and dates are read from the question's beginning
(:func:`llm_bot.db.hybrid.query_text`). Messages
already in the window are excluded; the ones shown to the model are put back in time order by
context assembly, so it reads them as the conversation they were.

BM25 rather than ``ts_rank_cd``: ``ts_rank_cd`` weighs every query word alike, so in a
history where every message starts with a speaker's name, or a question's "say" matches every
"says", a turn that shares only those words ranks with one that shares the rare word that
matters. BM25 weighs a word by how few of *this user's* turns hold it (inverse document
frequency), saturates repeated words, and discounts long turns. The statistics come from the
user's ``STATS_TURNS`` (:mod:`llm_bot.memory.turns.recall`) most recent turns, read through the
``(user_id, created_at)`` index: exact for most users, an estimate of the current vocabulary
for very long histories, and a bounded cost either way (no table to keep in step on every write
and erasure).

No side reads the whole history of a deep user (docs/performance.md, "Recall at depth"): the
words are matched among the user's ``LEXICAL_WINDOW`` most recent turns (every turn of a user
below that depth), and the nearest turns come from an exact scan of the user's vectors up to
the depth at which the HNSW index over deep users' turns (:mod:`llm_bot.db.turn_index`) reads less
(``ANN_ROW_COST``), from the index beyond it. The index is approximate; every candidate's
similarity is computed exactly from its vector either way. Only turns marked ``indexed`` are in
the index (a deep user's, :mod:`llm_bot.db.turn_index`): a deep user's turns not yet marked
(written before they were deep, until ``llm-bot maintain`` marks them) are scanned exactly
beside it, through the partial index on unmarked turns. Recall says whether it found the user
deep (:class:`Recall`), so the pair the event writes is marked or not without a statement of
its own.

The statement is planned for its parameters on every call (``prepare=False``, ~1 ms): a
prepared statement's generic plan assumes every user has ~200 turns, and for a user with 100k
it read the whole history through the ``(user_id, created_at)`` index twice as slowly as the
scan a plan for that user picks (``llm-bot bench retrieval --depth-only``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.hybrid import SearchMode, query_text
from llm_bot.memory.dates import DATE_BONUS, date_window
from llm_bot.memory.derived import summary_window
from llm_bot.memory.fusion import (
    corrected,
    fused,
    ranks,
    replaced,
    summaries_covering,
    with_neighbours,
    with_pairs,
)
from llm_bot.memory.turns.recall import TurnCandidate, candidates
from llm_bot.telemetry.traces import memory_search

# The lexical side ranks the turns matching the query among the user's most recent this many:
# all of a user's turns up to that depth, a bounded cost beyond it.
LEXICAL_WINDOW = 10_000
# Each side's pool: the turns asked for (the window excluded), at least MIN_POOL. Deeper pools
# find nothing more: on LoCoMo's development half the recall section at 1,200 tokens (40 turns
# asked for) holds the same evidence from pools of 40, 80 and 160 a side, and recall@10
# the same from 40, 80 and 160 (docs/eval-retrieval.md), while each pooled turn brings its
# neighbours into the statement. The depth ``llm-bot maintain`` marks users deep from is never
# above recall's, as it reads MIN_POOL.
MIN_POOL = 40


@dataclass(frozen=True)
class Depth:
    """Where a user's history stops being read whole: the depth from which the index serves the
    dense side (by default from the table's size) and the lexical side's window. A test moves
    them to take a deep user's paths over a few turns."""

    deep_from: int | None = None  # None: from the table's size (ANN_ROW_COST)
    lexical_window: int = LEXICAL_WINDOW


@dataclass(frozen=True)
class RecalledTurn:
    """A recalled turn and why it ranks where it does: its own score on each side (cosine
    ``similarity``, BM25 ``lexical_score``), its place among all candidates on each side (1 is
    the best; None where that side did not score it: a mode without it, or no shared word), and
    the ``fused_score`` it is ordered by (neighbours and dates included). ``session_id`` is the
    session of its thread it was written in, so a reader can group turns by conversation."""

    thread_id: str
    seq: int
    role: str
    content: str
    created_at: datetime
    similarity: float
    fused_score: float
    session_id: int = 0
    lexical_score: float = 0.0
    dense_rank: int | None = None
    lexical_rank: int | None = None
    # A correction consolidation recorded, by which the turn ranks where its own scores would
    # not (:func:`llm_bot.memory.fusion.corrected`); an explanation names them. Empty for most
    # turns. The later turns that replace it, and took its place:
    replaced_by: tuple[tuple[str, int], ...] = ()
    # The outdated turns it replaces, whose places it took:
    replaces: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Recall:
    """The recalled turns, and whether the user was deep: the pair the event writes then enters
    the index (:mod:`llm_bot.db.turn_index`). Unknown (no candidate came back) reads as not
    deep: the pair is then scanned exactly until ``llm-bot maintain`` marks it."""

    turns: list[RecalledTurn]
    deep: bool


NO_RECALL = Recall([], deep=False)


async def recall_turns(
    connection: AsyncConnection[Any],
    user_id: str,
    text: str,
    vector: list[float],
    **options: Any,
) -> list[RecalledTurn]:
    """:func:`recall`'s turns alone (the benches, the evaluation)."""
    return (await recall(connection, user_id, text, vector, **options)).turns


@memory_search(
    "conversation_turns",
    lambda found: [(f"{turn.thread_id}#{turn.seq}", turn.fused_score) for turn in found.turns],
)
async def recall(
    connection: AsyncConnection[Any],
    user_id: str,
    text: str,
    vector: list[float],
    *,
    exclude: Collection[tuple[str, int]],
    limit: int | None,
    threshold: float,
    mode: SearchMode = "hybrid",
    include_private: bool = True,
    depth: Depth = Depth(),
    asked_at: datetime | None = None,
    ranked: int | None = None,
) -> Recall:
    """The ``limit`` most relevant turns above ``threshold`` (their own similarity), outside
    ``exclude``, best first (context assembly puts the ones it keeps back in time order);
    ``limit`` None: every candidate found, best first, for a reader that takes them until its
    budget of tokens is spent. Each side ranks ``ranked`` turns (default ``limit``), at least
    MIN_POOL. ``asked_at``, the question's time, places its relative dates ("yesterday", "two
    weeks ago"); without it only the months and years it names are read."""
    pool = max(ranked or limit or 0, MIN_POOL) + len(exclude)
    rows = await candidates(
        connection,
        user_id,
        text,
        vector,
        pool=pool,
        mode=mode,
        include_private=include_private,
        deep_from=depth.deep_from,
        lexical_window=depth.lexical_window,
    )
    by_key = {(row.thread_id, row.seq): row for row in rows}
    own_dense = {key: float(row.similarity) for key, row in by_key.items()}
    own_lexical = {key: float(row.keyword_score) for key, row in by_key.items()}
    replacing = {
        key: list(zip(row.replaced_by_threads or (), row.replaced_by_seqs, strict=True))
        for key, row in by_key.items()
        if row.replaced_by_seqs
    }
    outdated = (
        with_pairs(
            replaced(replacing, {key: row.created_at for key, row in by_key.items()}),
            _pair_partners(rows),
        )
        if replacing
        else {}
    )
    replaces: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for old, newer in outdated.items():
        for key in newer:
            replaces.setdefault(key, []).append(old)
    # The scores a turn is ranked by: an outdated turn and the turns replacing it trade places.
    current_dense = corrected(own_dense, outdated)
    current_lexical = corrected(own_lexical, outdated)
    spans = {
        key: summary_window(key[1], row.pair_index) for key, row in by_key.items() if key[1] < 0
    }
    covering = summaries_covering(spans, by_key)
    dense = with_neighbours(current_dense, covering)
    lexical = with_neighbours(current_lexical, covering)
    scores = fused(dense, lexical, use_dense=mode != "lexical", use_lexical=mode != "dense")
    dense_ranks = ranks(own_dense) if mode != "lexical" else {}
    lexical_ranks = ranks(own_lexical, scored=lambda score: score > 0) if mode != "dense" else {}
    window = date_window(query_text(text), asked_at)
    if window is not None:
        for key, row in by_key.items():
            scores[key] += DATE_BONUS if window.holds(row.created_at) else 0.0
    turns = [
        RecalledTurn(
            row.thread_id,
            row.seq,
            row.role,
            row.content,
            row.created_at,
            float(row.similarity),
            scores[key],
            row.session_id,
            own_lexical[key],
            dense_ranks.get(key),
            lexical_ranks.get(key),
            tuple(outdated.get(key, ())),
            tuple(replaces.get(key, ())),
        )
        for key, row in by_key.items()
        if max(float(row.similarity), current_dense[key]) >= threshold
        and key not in exclude
        and (mode != "lexical" or lexical[key] > 0)
    ]
    turns.sort(key=lambda turn: (-turn.fused_score, -turn.similarity, turn.thread_id, turn.seq))
    return Recall(turns if limit is None else turns[:limit], deep=any(row.deep for row in rows))


def _pair_partners(rows: Collection[TurnCandidate]) -> dict[tuple[str, int], tuple[str, int]]:
    """Each candidate's other turn of its pair among the candidates: the user's turn and the
    reply stored with it share a thread and a pair index (a summary is of no pair)."""
    pairs: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for row in rows:
        if row.seq > 0:
            pairs.setdefault((row.thread_id, row.pair_index), []).append((row.thread_id, row.seq))
    return {
        key: mate for pair in pairs.values() if len(pair) == 2 for key, mate in (pair, pair[::-1])
    }
