"""Hybrid search over one user's memories: vector similarity and full-text, fused by rank.

Dense retrieval finds paraphrases ("films" for "movies"); full-text finds rare exact words
(names, products) that small embedding models blur. Both candidate lists come from one SQL
statement scoped to a single namespace and are fused by reciprocal rank (RRF, k = 60). A hit
passes when its similarity reaches the threshold or when it shares a word with the query: the
full-text match is on content words only (the English configuration drops stop words), and a
small model scores "allergic to peanuts" against "peanut-free dishes" below any threshold that
keeps noise out, though the shared rare word is the best evidence there is.

The query runs on LangGraph's own tables (``store``, ``store_vectors``): the store has no
full-text search, and one statement with one query embedding beats two round trips.

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
    SELECT v.key, row_number() OVER (ORDER BY v.embedding <=> %(vector)s::vector) AS rank
    FROM store_vectors v
    WHERE v.prefix = %(prefix)s AND v.field_name = 'content' AND %(use_dense)s
    ORDER BY v.embedding <=> %(vector)s::vector
    LIMIT %(pool)s
),
-- One user's memories first: a common word matches across all users through the GIN index,
-- so filtering the namespace after the full-text match would read far more rows.
mine AS MATERIALIZED (
    SELECT s.key, to_tsvector('english', s.value->>'content') AS document
    FROM store s
    WHERE s.prefix = %(prefix)s AND %(use_lexical)s
      AND (%(include_private)s OR coalesce(s.value->>'learnedIn', 'dm') = 'public')
),
lexical AS (
    SELECT mine.key,
           row_number() OVER (ORDER BY ts_rank_cd(mine.document, query.terms) DESC) AS rank
    FROM mine, query
    WHERE mine.document @@ query.terms
    LIMIT %(pool)s
)
SELECT s.key, s.value, s.created_at, s.updated_at,
       1 - (v.embedding <=> %(vector)s::vector) AS similarity,
       dense.rank AS dense_rank, lexical.rank AS lexical_rank
FROM (SELECT key FROM dense UNION SELECT key FROM lexical) hit
JOIN store s ON s.prefix = %(prefix)s AND s.key = hit.key
JOIN store_vectors v ON v.prefix = s.prefix AND v.key = s.key AND v.field_name = 'content'
LEFT JOIN dense ON dense.key = hit.key
LEFT JOIN lexical ON lexical.key = hit.key
WHERE %(include_private)s OR coalesce(s.value->>'learnedIn', 'dm') = 'public'
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
    ``scope`` names whose rows it may read (a namespace, a user). ``prepare=False`` plans the
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
    prefix: str,
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
    scope = {"prefix": prefix, "include_private": include_private}
    rows = await fused_candidates(
        connection, _HYBRID_SQL, scope, text, vector, max(limit * 4, 20), mode
    )
    hits = (
        MemoryHit(
            key=row["key"],
            content=row["value"].get("content", ""),
            metadata=row["value"].get("metadata") or {},
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            similarity=float(row["similarity"]),
            fused_score=rrf(row["dense_rank"], row["lexical_rank"]),
            keyword_match=row["lexical_rank"] is not None,
        )
        for row in rows
    )
    return best((hit for hit in hits if hit.similarity >= threshold or hit.keyword_match), limit)
