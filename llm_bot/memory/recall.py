"""Recall over history: this user's older messages, from any thread, that bear on the prompt.

One SQL statement over ``conversation_turns`` of one user only finds the candidates: the
nearest turns by embedding, and the best turns by BM25 over their full-text vectors, each side
``pool`` deep, then the turns around those (``NEIGHBOUR_REACH`` either side in the thread).
Python fuses the two scores of every candidate (:mod:`llm_bot.memory.fusion`) and prefers
turns written in a month or year the question names (:mod:`llm_bot.memory.dates`). Words and
dates are read from the question's beginning (:func:`llm_bot.memory.search.query_text`). Messages
already in the window are excluded; the ones shown to the model are put back in time order by
context assembly, so it reads them as the conversation they were.

BM25 rather than ``ts_rank_cd``: ``ts_rank_cd`` weighs every query word alike, so in a
history where every message starts with a speaker's name, or a question's "say" matches every
"says", a turn that shares only those words ranks with one that shares the rare word that
matters. BM25 weighs a word by how few of *this user's* turns hold it (inverse document
frequency), saturates repeated words, and discounts long turns. The statistics come from the
user's ``STATS_TURNS`` most recent turns, read through the ``(user_id, created_at)`` index:
exact for most users, an estimate of the current vocabulary for very long histories, and a
bounded cost either way (no table to keep in step on every write and erasure).

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
scan a plan for that user picks (docs/performance.md, "Per-user depth").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.turn_index import LIVE_COLUMN, in_space, near_distance
from llm_bot.memory.dates import DATE_BONUS, date_window
from llm_bot.memory.fusion import NEIGHBOUR_REACH, fused, with_neighbours
from llm_bot.memory.search import SearchMode, fused_candidates, query_text

STATS_TURNS = 1000
# A user's nearest turns come from an exact scan of their vectors or from the HNSW index over
# deep users' turns (llm_bot.db.turn_index), whichever reads less. The scan reads the user's ``d``
# turns; the index walks about ``pool / share`` entries to find ``pool`` of theirs, ``share``
# being ``d / N`` of the table's ``N`` rows, each entry ~ANN_ROW_COST times a scanned row
# (fitted on the depth bench: 80 ms for 5,000 entries, 28 ms to scan 10,000 turns). So the
# index from ``d * d >= ANN_ROW_COST * pool * N`` (N from the table's statistics), never below
# DEEP_FROM turns: ~20k turns in a table of 1.2M, ~60k in one of 10M. The index holds only deep
# users' turns, fewer than N, so this overstates its walk: the depth errs towards the scan.
DEEP_FROM = 5000
ANN_ROW_COST = 8
# The lexical side ranks the turns matching the query among the user's most recent this many:
# all of a user's turns up to that depth, a bounded cost beyond it.
LEXICAL_WINDOW = 10_000
# The smallest pool a recall asks for (``limit * 4``, at least 20, and the window excluded):
# the depth ``llm-bot maintain`` marks users deep from is then never above recall's.
MIN_POOL = 20
BM25_K1 = 1.2  # the textbook saturation and length normalisation, not fitted to any data set
BM25_B = 0.75


def _deep_from_sql(rows: str, source: str) -> str:
    """The depth from which a user is deep, one row: ``%(deep_from)s`` when given (a test),
    else from ``rows``, the size of the table of turns, and ``%(pool)s`` (ANN_ROW_COST)."""
    return f"""
    SELECT coalesce(%(deep_from)s::bigint, greatest({DEEP_FROM}, ceil(sqrt(
        {ANN_ROW_COST} * %(pool)s * greatest({rows}, 0)))))::bigint AS turns
    FROM {source}
"""


# For every user (``llm-bot maintain``): the table's size from the catalog.
DEEP_FROM_SQL = _deep_from_sql("reltuples", "pg_class WHERE oid = 'conversation_turns'::regclass")
# For one user (recall): the size of the table holding the user's turns, read through one of
# them (none: no depth). On Citus that is the user's shard, whose own index recall reads, and
# the statement stays one Citus sends whole to that shard: one that also read the catalog would
# be planned in pieces, which Citus 14 fails on for recall's ("invalid attnum").
_USERS_DEEP_FROM = _deep_from_sql(
    "relation_rows(t.tableoid)", "conversation_turns t WHERE t.user_id = %(user)s LIMIT 1"
)


def _visible(visibility: str) -> str:
    """Turns the caller may see: all of them, or only those learned in public channels."""
    return f"(%(include_private)s OR {visibility} = 'public')"


# BM25 of the turn ``t`` for the query's weighted terms (a term's frequency is its positions).
_BM25 = f"""(
    SELECT sum(weights.idf * tf.n * {BM25_K1 + 1} / (tf.n + {BM25_K1} * (
        1 - {BM25_B} + {BM25_B} * length(t.search) / (SELECT avgdl FROM stats))))
    FROM unnest(t.search) AS word
    JOIN weights ON weights.lexeme = word.lexeme
    CROSS JOIN LATERAL (SELECT coalesce(array_length(word.positions, 1), 1) AS n) tf
)"""

# Each side keeps its best ``pool`` by a top-N sort (a heap of ``pool`` rows): numbering or
# materializing every row of a user would spill to disk at 100k turns.


@cache
def _recall_sql(dimensions: int) -> str:
    """The statement for query vectors of ``dimensions`` (the index's size is part of it)."""
    return f"""
WITH terms AS (
    SELECT DISTINCT lexeme
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
    WHERE %(use_lexical)s
),
sample AS MATERIALIZED (
    SELECT search FROM conversation_turns
    WHERE user_id = %(user)s AND {_visible("visibility")} AND EXISTS (SELECT FROM terms)
    ORDER BY created_at DESC
    LIMIT {STATS_TURNS}
),
stats AS (SELECT count(*) AS n, greatest(avg(length(search)), 1) AS avgdl FROM sample),
weights AS (
    SELECT terms.lexeme, stats.n, held.df,
           ln(1 + (stats.n - held.df + 0.5) / (held.df + 0.5)) AS idf
    FROM terms CROSS JOIN stats
    CROSS JOIN LATERAL (
        SELECT count(*) AS df FROM sample
        WHERE sample.search @@ quote_literal(terms.lexeme)::tsquery
    ) held
),
-- The words that find candidates: all of them while the sample is the whole history; beyond,
-- only those held by at most half of it (a turn that shares nothing else with the query is
-- no evidence, and ranking all of a long history for one common word costs ~1 s at 100k).
query AS (
    SELECT to_tsquery('simple', coalesce(string_agg(quote_literal(lexeme), ' | '), '')) AS terms
    FROM weights
    WHERE n < {STATS_TURNS} OR df * 2 <= n
),
lexical_top AS (
    SELECT t.thread_id, t.seq
    FROM (
        SELECT thread_id, seq, search FROM conversation_turns
        WHERE user_id = %(user)s AND %(use_lexical)s AND {_visible("visibility")}
        ORDER BY created_at DESC
        LIMIT %(lexical_window)s
    ) t
    WHERE t.search @@ (SELECT terms FROM query)
    ORDER BY {_BM25} DESC, t.thread_id, t.seq
    LIMIT %(pool)s
),
-- The user's depth, counted no further than the depth from which the index reads less (an
-- index-only scan; see ANN_ROW_COST), picks one of the two dense sides below. The choice is a
-- LIMIT of 0 rather than a filter: a Limit node with nothing to return never starts its input,
-- where a filter was placed under a parallel sort whose workers started anyway (~9 ms).
deep_from AS ({_USERS_DEEP_FROM}),
depth AS (
    SELECT count(*) >= (SELECT turns FROM deep_from) AS deep
    FROM (
        SELECT FROM conversation_turns WHERE user_id = %(user)s
        LIMIT (SELECT turns FROM deep_from)
    ) mine
),
dense_exact AS (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND embedding IS NOT NULL AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY embedding <=> %(vector)s::vector, thread_id, seq
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN 0 ELSE %(pool)s END
),
-- The index returns rows roughly in order of distance (pgvector's relaxed_order iterative
-- scan); the exact similarity of each is computed below.
dense_near AS MATERIALIZED (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND {in_space(LIVE_COLUMN, dimensions)} AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY {near_distance(LIVE_COLUMN, dimensions)}
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN %(pool)s ELSE 0 END
),
-- A deep user's turns the index does not hold yet, exactly (none once maintain marked them).
dense_unindexed AS (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND NOT indexed AND embedding IS NOT NULL AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY embedding <=> %(vector)s::vector, thread_id, seq
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN %(pool)s ELSE 0 END
),
around AS (
    SELECT DISTINCT hit.thread_id, hit.seq + step AS seq
    FROM (SELECT thread_id, seq FROM dense_exact UNION SELECT thread_id, seq FROM dense_near
          UNION SELECT thread_id, seq FROM dense_unindexed
          UNION SELECT thread_id, seq FROM lexical_top) hit,
         generate_series(-{NEIGHBOUR_REACH}, {NEIGHBOUR_REACH}) AS step
)
-- A primary-key lookup per candidate (LIMIT 1 keeps the planner from reading the user's whole
-- history by its index instead, which a generic plan of this statement chose). A neighbour in
-- a shared channel may be another speaker's turn: not the user's, so not found.
SELECT t.thread_id, t.seq, t.role, t.content, t.created_at,
       1 - (t.embedding <=> %(vector)s::vector) AS similarity,
       coalesce({_BM25}, 0) AS keyword_score, (SELECT deep FROM depth) AS deep
FROM around
CROSS JOIN LATERAL (
    SELECT * FROM conversation_turns
    WHERE user_id = %(user)s AND thread_id = around.thread_id AND seq = around.seq
    LIMIT 1
) t
WHERE t.embedding IS NOT NULL AND {_visible("t.visibility")}
"""


@dataclass(frozen=True)
class Depth:
    """Where a user's history stops being read whole: the depth from which the index serves the
    dense side (by default from the table's size) and the lexical side's window. A test moves
    them to take a deep user's paths over a few turns."""

    deep_from: int | None = None  # None: from the table's size (ANN_ROW_COST)
    lexical_window: int = LEXICAL_WINDOW


@dataclass(frozen=True)
class RecalledTurn:
    thread_id: str
    seq: int
    role: str
    content: str
    created_at: datetime
    similarity: float
    fused_score: float


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


async def recall(
    connection: AsyncConnection[Any],
    user_id: str,
    text: str,
    vector: list[float],
    *,
    exclude: Collection[tuple[str, int]],
    limit: int,
    threshold: float,
    mode: SearchMode = "hybrid",
    include_private: bool = True,
    depth: Depth = Depth(),
) -> Recall:
    """The ``limit`` most relevant turns above ``threshold`` (their own similarity), outside
    ``exclude``, best first (context assembly puts the ones it keeps back in time order)."""
    pool = max(limit * 4, 20) + len(exclude)
    scope = {
        "user": user_id,
        "include_private": include_private,
        "deep_from": depth.deep_from,
        "lexical_window": depth.lexical_window,
    }
    rows = await fused_candidates(
        connection,
        _recall_sql(len(vector)),
        scope,
        text,
        vector,
        pool,
        mode,
        prepare=False,
    )
    by_key = {(row["thread_id"], row["seq"]): row for row in rows}
    dense = with_neighbours({key: float(row["similarity"]) for key, row in by_key.items()})
    lexical = with_neighbours({key: float(row["keyword_score"]) for key, row in by_key.items()})
    scores = fused(dense, lexical, use_dense=mode != "lexical", use_lexical=mode != "dense")
    window = date_window(query_text(text))
    if window is not None:
        for key, row in by_key.items():
            scores[key] += DATE_BONUS if window.holds(row["created_at"]) else 0.0
    turns = [
        RecalledTurn(
            row["thread_id"],
            row["seq"],
            row["role"],
            row["content"],
            row["created_at"],
            float(row["similarity"]),
            scores[key],
        )
        for key, row in by_key.items()
        if float(row["similarity"]) >= threshold
        and key not in exclude
        and (mode != "lexical" or lexical[key] > 0)
    ]
    turns.sort(key=lambda turn: (-turn.fused_score, -turn.similarity, turn.thread_id, turn.seq))
    return Recall(turns[:limit], deep=any(row["deep"] for row in rows))
