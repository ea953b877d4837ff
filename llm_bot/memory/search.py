"""Hybrid search over one user's memories: vector similarity and full-text, fused by rank.

Dense retrieval finds paraphrases ("films" for "movies"); full-text finds rare exact words
(names, products) that small embedding models blur. Both candidate lists come from one SQL
statement scoped to a single user and are fused by reciprocal rank (RRF, k = 60). A hit
passes when its similarity reaches the threshold or when it shares a word with the query: the
full-text match is on content words only (the English configuration drops stop words), and a
small model scores "allergic to peanuts" against "peanut-free dishes" below any threshold that
keeps noise out, though the shared rare word is the best evidence there is.

Both sides read one user's rows of ``memories`` through its primary key: the distance to each
stored vector (an exact scan: a user's memories are capped, ``RETENTION_MEMORIES_PER_USER``),
and the stored full-text vector (``search``), so no memory is parsed at query time. Neither
side has an index over all users: a GIN index on ``search`` let the planner match a common word
in every user's memories first (at 100k memories over 1,000 users, lexical p95 35 ms instead
of 3). A memory without a vector (embedding failed when it was written) is found by its words
only.

A query's words are read from its first ``QUERY_MAX_CHARS`` characters, the beginning the
embedder reads too (:func:`llm_bot.llm.embeddings.embeddable`): both sides of a search then
look at the same text, and the full-text side stays bounded. ``to_tsvector`` and
``to_tsquery`` cost time and stack in the number of words: a prompt of 360 KB (an event may
carry a megabyte) took 7-22 s a query, and one of 630 KB failed with "stack depth limit
exceeded". The constant is the embedder's default (``MEMORY_EMBEDDING_MAX_CHARS``), not the
setting: a deployment that embeds more of a prompt does not make every query parse more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from llm_bot.db.vectors import vector_param
from llm_bot.llm.embeddings import MAX_CHARS

RRF_K = 60
QUERY_MAX_CHARS = MAX_CHARS
SearchMode = Literal["hybrid", "dense", "lexical"]

# Full-text: the query's lexemes OR-ed together, so a question matches any of its words.
OR_TERMS = """to_tsquery('simple', coalesce(array_to_string(array(
    SELECT quote_literal(lexeme)
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
), ' | '), ''))"""

_HYBRID_SQL = f"""
WITH query AS (SELECT {OR_TERMS} AS terms),
dense AS (
    SELECT key, row_number() OVER (ORDER BY embedding <=> %(vector)s::vector) AS rank
    FROM memories
    WHERE user_id = %(user)s AND embedding IS NOT NULL AND %(use_dense)s
      AND (%(include_private)s OR visibility = 'public')
    ORDER BY embedding <=> %(vector)s::vector
    LIMIT %(pool)s
),
-- The user's rows first: matched through an index over every user's memories, a common word
-- would read every user's rows holding it.
mine AS MATERIALIZED (
    SELECT key, search FROM memories
    WHERE user_id = %(user)s AND %(use_lexical)s
      AND (%(include_private)s OR visibility = 'public')
),
lexical AS (
    SELECT key, row_number() OVER (ORDER BY ts_rank_cd(search, query.terms) DESC) AS rank
    FROM mine, query
    WHERE search @@ query.terms
    ORDER BY rank
    LIMIT %(pool)s
)
SELECT m.key, m.content, m.metadata, m.created_at, m.updated_at,
       coalesce(1 - (m.embedding <=> %(vector)s::vector), 0) AS similarity,
       dense.rank AS dense_rank, lexical.rank AS lexical_rank
FROM (SELECT key FROM dense UNION SELECT key FROM lexical) hit
JOIN memories m ON m.user_id = %(user)s AND m.key = hit.key
LEFT JOIN dense ON dense.key = hit.key
LEFT JOIN lexical ON lexical.key = hit.key
"""


@dataclass(frozen=True)
class MemoryHit:
    key: str
    content: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime
    similarity: float
    fused_score: float
    keyword_match: bool = False  # shares a content word with the query


def rrf(*ranks: int | None) -> float:
    return sum(1.0 / (RRF_K + rank) for rank in ranks if rank is not None)


class Ranked(Protocol):
    @property
    def fused_score(self) -> float: ...

    @property
    def similarity(self) -> float: ...


R = TypeVar("R", bound=Ranked)


async def fused_candidates(
    connection: AsyncConnection[Any],
    sql: str,
    scope: dict[str, object],
    text: str,
    vector: list[float],
    pool: int,
    mode: SearchMode,
    *,
    prepare: bool | None = None,
) -> list[dict[str, Any]]:
    """Rows of a hybrid statement (memories or recall) with their dense and lexical scores;
    ``scope`` names whose rows it may read (a user's). ``prepare=False`` plans the
    statement for its parameters every time (the connection's default is to prepare)."""
    parameters = {
        **scope,
        "text": query_text(text),
        "vector": vector_param(vector),
        "pool": pool,
        "use_dense": mode != "lexical",
        "use_lexical": mode != "dense",
    }
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(sql, parameters, prepare=prepare)
        return await cursor.fetchall()


def query_text(text: str) -> str:
    """What of a query its words are read from: its first ``QUERY_MAX_CHARS`` characters."""
    return text[:QUERY_MAX_CHARS]


def best(hits: Iterable[R], limit: int) -> list[R]:
    """By fused rank, then similarity."""
    return sorted(hits, key=lambda hit: (-hit.fused_score, -hit.similarity))[:limit]


async def hybrid_search(
    connection: AsyncConnection[Any],
    user_id: str,
    text: str,
    vector: list[float],
    *,
    limit: int,
    threshold: float,
    mode: SearchMode = "hybrid",
    include_private: bool = True,
) -> list[MemoryHit]:
    """The ``limit`` best hits at or above ``threshold`` or sharing a word with the query: by
    fused rank, then similarity; without ``include_private``, only memories learned in shared
    channels."""
    scope = {"user": user_id, "include_private": include_private}
    rows = await fused_candidates(
        connection, _HYBRID_SQL, scope, text, vector, max(limit * 4, 20), mode
    )
    hits = (
        MemoryHit(
            key=row["key"],
            content=row["content"],
            metadata=row["metadata"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            similarity=float(row["similarity"]),
            fused_score=rrf(row["dense_rank"], row["lexical_rank"]),
            keyword_match=row["lexical_rank"] is not None,
        )
        for row in rows
    )
    return best((hit for hit in hits if hit.similarity >= threshold or hit.keyword_match), limit)
