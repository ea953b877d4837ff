"""Recall over history: this user's older messages, from any thread, that bear on the prompt.

The same hybrid retrieval as memories (vector and full-text candidates fused by reciprocal
rank, the similarity threshold applied to every hit), over ``conversation_turns`` of one user
only. Messages already in the window are excluded; the ones shown to the model are put back in
time order, so it reads them as the conversation they were.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from llm_bot.memory.search import OR_TERMS, SearchMode, best, fused_candidates, rrf

# Each side keeps its best ``pool`` by a top-N sort (a heap of ``pool`` rows) and numbers only
# those: numbering every row of a user sorted all of them, and for a user with 100k turns the
# materialized lexical candidates spilled to disk (docs/performance.md, "Per-user depth").
_RECALL_SQL = f"""
WITH query AS (SELECT {OR_TERMS} AS terms),
dense AS (
    SELECT thread_id, seq, row_number() OVER (ORDER BY distance, thread_id, seq) AS rank
    FROM (
        SELECT thread_id, seq, embedding <=> %(vector)s::vector AS distance
        FROM conversation_turns
        WHERE user_id = %(user)s AND embedding IS NOT NULL AND %(use_dense)s
          AND (%(include_private)s OR learned_in = 'public')
        ORDER BY distance
        LIMIT %(pool)s
    ) nearest
),
lexical AS (
    SELECT thread_id, seq, row_number() OVER (ORDER BY score DESC, thread_id, seq) AS rank
    FROM (
        SELECT t.thread_id, t.seq, ts_rank_cd(t.search, query.terms) AS score
        FROM conversation_turns t, query
        WHERE t.user_id = %(user)s AND %(use_lexical)s AND t.search @@ query.terms
          AND (%(include_private)s OR t.learned_in = 'public')
        ORDER BY score DESC
        LIMIT %(pool)s
    ) matching
)
SELECT t.thread_id, t.seq, t.role, t.content, t.created_at,
       1 - (t.embedding <=> %(vector)s::vector) AS similarity,
       dense.rank AS dense_rank, lexical.rank AS lexical_rank
FROM (SELECT thread_id, seq FROM dense UNION SELECT thread_id, seq FROM lexical) hit
JOIN conversation_turns t ON t.thread_id = hit.thread_id AND t.seq = hit.seq
LEFT JOIN dense ON dense.thread_id = hit.thread_id AND dense.seq = hit.seq
LEFT JOIN lexical ON lexical.thread_id = hit.thread_id AND lexical.seq = hit.seq
WHERE t.user_id = %(user)s AND t.embedding IS NOT NULL
"""


@dataclass(frozen=True)
class RecalledTurn:
    thread_id: str
    seq: int
    role: str
    content: str
    created_at: datetime
    similarity: float
    fused_score: float


async def recall_turns(
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
) -> list[RecalledTurn]:
    """The ``limit`` most relevant turns above ``threshold``, outside ``exclude``, best first
    (context assembly puts the ones it keeps back in time order)."""
    pool = max(limit * 4, 20) + len(exclude)
    rows = await fused_candidates(
        connection,
        _RECALL_SQL,
        {"user": user_id, "include_private": include_private},
        text,
        vector,
        pool,
        mode,
    )
    turns = (
        RecalledTurn(
            row["thread_id"],
            row["seq"],
            row["role"],
            row["content"],
            row["created_at"],
            float(row["similarity"]),
            rrf(row["dense_rank"], row["lexical_rank"]),
        )
        for row in rows
        if float(row["similarity"]) >= threshold and (row["thread_id"], row["seq"]) not in exclude
    )
    return best(turns, limit)
