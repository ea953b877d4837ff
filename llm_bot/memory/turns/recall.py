"""Recall's statement over a user's turns (:mod:`llm_bot.memory.recall` says how it ranks) and
the depth from which a user's nearest turns come from the index."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from psycopg import AsyncConnection

from llm_bot.db.hybrid import SearchMode, hybrid_rows
from llm_bot.db.turn_index import LIVE_COLUMN, in_space, near_distance
from llm_bot.memory.fusion import NEIGHBOUR_REACH, SUMMARY_EXPANSION
from llm_bot.memory.memories import replacing_turns
from llm_bot.memory.versions import cited_by_earlier_texts

# Recall's statement (:mod:`llm_bot.memory.recall` says how it ranks). BM25's statistics come
# from the user's this many most recent turns.
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


# BM25 of the turn ``t`` for the query's weighted terms (a term's frequency is its positions),
# a float8 (``stats`` and ``weights`` are): a numeric reaches Python as a Decimal, read and
# converted for each of the hundreds of candidates.
_BM25 = f"""(
    SELECT sum(weights.idf * tf.n * {BM25_K1 + 1} / (tf.n + {BM25_K1} * (
        1 - {BM25_B} + {BM25_B} * length(t.search) / (SELECT avgdl FROM stats))))
    FROM unnest(t.search) AS word
    JOIN weights ON weights.lexeme = word.lexeme
    CROSS JOIN LATERAL (SELECT coalesce(array_length(word.positions, 1), 1) AS n) tf
)"""

# Each side keeps its best ``pool`` by a top-N sort (a heap of ``pool`` rows): numbering or
# materializing every row of a user would spill to disk at 100k turns.
#
# A deep user's dense side keeps half the pool. Its index walk visits ~``pool / share`` entries,
# each with a row read, so its cost is the pool's (a 100k-turn user in a 1.1M-turn table: ~730
# entries for 66 turns), while the scan's is the user's turns whatever the pool. The nearest
# turns past the first half add no evidence on LoCoMo, even with every user's dense side at half
# (docs/eval-retrieval.md, "A shallower dense side").
_DEEP_DENSE_POOL = "(%(pool)s + 1) / 2"


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
stats AS (SELECT count(*) AS n, greatest(avg(length(search))::float8, 1) AS avgdl FROM sample),
weights AS (
    SELECT terms.lexeme, stats.n, held.df,
           ln(1 + (stats.n - held.df + 0.5::float8) / (held.df + 0.5::float8)) AS idf
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
-- Every word of the query, which a turn must hold to score above 0: one that holds none is
-- not read word by word (most of the neighbours brought below).
every_word AS (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS words FROM weights),
-- The user's depth, counted no further than the depth from which the index reads less (an
-- index-only scan; see ANN_ROW_COST) or past the lexical window, picks one of the two dense
-- sides and one of the two lexical ones below.
deep_from AS ({_USERS_DEEP_FROM}),
depth AS (
    SELECT count(*) >= (SELECT turns FROM deep_from) AS deep,
           count(*) > %(lexical_window)s AS beyond_window
    FROM (
        SELECT FROM conversation_turns WHERE user_id = %(user)s
        LIMIT greatest((SELECT turns FROM deep_from), %(lexical_window)s + 1)
    ) mine
),
-- The scans of one user's turns below are each read beside ``depth`` and filtered by it: the
-- planner takes the filter as a one-time filter that starts nothing for the users it excludes,
-- and plans no parallel scan under an outer reference. Parallel workers cost more than they
-- save here (~10 ms to start two under load, while the events beside it want the cores): the
-- planner chose them for a deep user's unmarked turns, estimated as their share of every
-- unmarked turn (tens of thousands) where maintain leaves none.
--
-- The turns the words are matched among: the most recent ``lexical_window``, or, for a user
-- with no more turns than that, all of them read without sorting them by time (a sort of 10k
-- turns was a tenth of a 10k-turn user's recall; the LIMIT, which takes none away, keeps the
-- scan beside ``depth`` rather than merged into the statement).
lexical_matches AS (
    SELECT m.thread_id, m.seq, m.search FROM depth CROSS JOIN LATERAL (
        SELECT thread_id, seq, search FROM conversation_turns
        WHERE user_id = %(user)s AND %(use_lexical)s AND {_visible("visibility")}
          AND search @@ (SELECT terms FROM query) AND NOT depth.beyond_window
        LIMIT %(lexical_window)s
    ) m
),
lexical_window AS (
    SELECT t.thread_id, t.seq, t.search
    FROM depth CROSS JOIN LATERAL (
        SELECT thread_id, seq, search FROM conversation_turns
        WHERE user_id = %(user)s AND %(use_lexical)s AND {_visible("visibility")}
          AND depth.beyond_window
        ORDER BY created_at DESC
        LIMIT %(lexical_window)s
    ) t
    WHERE t.search @@ (SELECT terms FROM query)
),
lexical_top AS (
    SELECT t.thread_id, t.seq
    FROM (SELECT * FROM lexical_matches UNION ALL SELECT * FROM lexical_window) t
    ORDER BY {_BM25} DESC, t.thread_id, t.seq
    LIMIT %(pool)s
),
dense_exact AS (
    SELECT e.thread_id, e.seq FROM depth CROSS JOIN LATERAL (
        SELECT thread_id, seq FROM conversation_turns
        WHERE user_id = %(user)s AND embedding IS NOT NULL AND %(use_dense)s
          AND {_visible("visibility")} AND NOT depth.deep
        ORDER BY embedding <=> %(vector)s::vector, thread_id, seq
        LIMIT %(pool)s
    ) e
),
-- The index returns rows roughly in order of distance (pgvector's relaxed_order iterative
-- scan); the exact similarity of each is computed below. An index scan, never parallel, limited
-- to nothing for a user who is not deep (a Limit of 0 never starts its input).
dense_near AS MATERIALIZED (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND {in_space(LIVE_COLUMN, dimensions)} AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY {near_distance(LIVE_COLUMN, dimensions)}
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN {_DEEP_DENSE_POOL} ELSE 0 END
),
-- A deep user's turns the index does not hold yet, exactly (none once maintain marked them).
dense_unindexed AS (
    SELECT u.thread_id, u.seq FROM depth CROSS JOIN LATERAL (
        SELECT thread_id, seq FROM conversation_turns
        WHERE user_id = %(user)s AND NOT indexed AND embedding IS NOT NULL AND %(use_dense)s
          AND {_visible("visibility")} AND depth.deep
        ORDER BY embedding <=> %(vector)s::vector, thread_id, seq
        LIMIT {_DEEP_DENSE_POOL}
    ) u
),
hits AS (
    SELECT thread_id, seq FROM dense_exact UNION SELECT thread_id, seq FROM dense_near
    UNION SELECT thread_id, seq FROM dense_unindexed UNION SELECT thread_id, seq FROM lexical_top
),
-- Corrections (consolidation's versions, llm_bot.memory.versions): a hit an earlier text of a
-- derived memory cites, and no current memory of the user does, trades places with the turns
-- the memory's current text cites, which come with it. Only the citations are read, never the
-- words: which turn corrects which is what consolidation recorded. Seqs are compared as the
-- metadata writes them, and a cited seq that is no number is skipped.
cited_before AS MATERIALIZED ({cited_by_earlier_texts("hits")}),
replaced AS MATERIALIZED ({replacing_turns("cited_before")}),
found AS (SELECT thread_id, seq FROM hits UNION SELECT by_thread, by_seq FROM replaced),
replaced_by AS (
    SELECT thread_id, seq, array_agg(by_thread ORDER BY by_thread, by_seq) AS threads,
           array_agg(by_seq ORDER BY by_thread, by_seq) AS seqs
    FROM replaced GROUP BY thread_id, seq
),
-- A session's summary (seq < 0: minus the last seq it covers, its pair_index the seq before the
-- first) stands for the turns it covers: the {SUMMARY_EXPANSION} of them nearest the question
-- come with it, found or not by either side, each a primary-key range of at most a session.
covered AS (
    SELECT c.thread_id, c.seq
    FROM hits
    CROSS JOIN LATERAL (
        SELECT pair_index AS after_seq FROM conversation_turns
        WHERE user_id = %(user)s AND thread_id = hits.thread_id AND seq = hits.seq
        LIMIT 1
    ) summary
    CROSS JOIN LATERAL (
        SELECT thread_id, seq FROM conversation_turns
        WHERE user_id = %(user)s AND thread_id = hits.thread_id
          AND seq > summary.after_seq AND seq <= -hits.seq AND embedding IS NOT NULL
          AND {_visible("visibility")}
        ORDER BY embedding <=> %(vector)s::vector, seq
        LIMIT {SUMMARY_EXPANSION}
    ) c
    WHERE hits.seq < 0
),
around AS (
    SELECT hit.thread_id, hit.seq + step AS seq
    FROM found hit, generate_series(-{NEIGHBOUR_REACH}, {NEIGHBOUR_REACH}) AS step
    WHERE hit.seq > 0
    UNION SELECT thread_id, seq FROM found
    UNION SELECT thread_id, seq FROM covered
)
-- A primary-key lookup per candidate (LIMIT 1 keeps the planner from reading the user's whole
-- history by its index instead, which a generic plan of this statement chose). A neighbour in
-- a shared channel may be another speaker's turn: not the user's, so not found.
SELECT t.thread_id, t.seq, t.session_id, t.pair_index, t.role, t.content, t.created_at,
       1 - (t.embedding <=> %(vector)s::vector) AS similarity,
       CASE WHEN t.search @@ (SELECT words FROM every_word) THEN coalesce({_BM25}, 0) ELSE 0 END
           AS keyword_score,
       (SELECT deep FROM depth) AS deep,
       r.threads AS replaced_by_threads, r.seqs AS replaced_by_seqs
FROM around
CROSS JOIN LATERAL (
    SELECT * FROM conversation_turns
    WHERE user_id = %(user)s AND thread_id = around.thread_id AND seq = around.seq
    LIMIT 1
) t
LEFT JOIN replaced_by r ON r.thread_id = t.thread_id AND r.seq = t.seq
WHERE t.embedding IS NOT NULL AND {_visible("t.visibility")}
"""


class TurnCandidate(NamedTuple):
    """A turn recall's statement found (or brought as a neighbour or a summary's turn): its
    similarity to the query, its BM25 score (0: none of the query's words), and whether its
    user was deep (the index served the dense side)."""

    thread_id: str
    seq: int
    session_id: int
    pair_index: int
    role: str
    content: str
    created_at: datetime
    similarity: float
    keyword_score: float
    deep: bool
    # The later turns that replace it: those the current text of a memory cites, whose earlier
    # text alone cited this one (a correction consolidation recorded); None for most turns.
    replaced_by_threads: list[str] | None
    replaced_by_seqs: list[int] | None


async def candidates(
    connection: AsyncConnection[Any],
    user_id: str,
    text: str,
    vector: list[float],
    *,
    pool: int,
    mode: SearchMode,
    include_private: bool,
    deep_from: int | None,
    lexical_window: int,
) -> list[TurnCandidate]:
    """The user's ``pool`` nearest turns and ``pool`` best by their words, with their
    neighbours and what their summaries cover. Planned for its parameters every time: a
    generic plan of it read a user's whole history (see the statement)."""
    scope = {
        "user": user_id,
        "include_private": include_private,
        "deep_from": deep_from,
        "lexical_window": lexical_window,
    }
    sql = _recall_sql(len(vector))
    return await hybrid_rows(
        connection, sql, TurnCandidate, scope, text, vector, pool, mode, prepare=False, binary=True
    )
