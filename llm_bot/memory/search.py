"""Hybrid search over one user's memories: vector similarity and full-text, fused by rank.

Dense retrieval finds paraphrases ("films" for "movies"); full-text finds rare exact words
(names, products) that small embedding models blur. Both candidate lists come from one SQL
statement scoped to a single user and are fused by reciprocal rank (RRF, k = 60). A hit
passes when its similarity reaches the threshold or when it shares a word with the query: the
full-text match is on content words only (the English configuration drops stop words), and a
small model scores "allergic to peanuts" against "peanut-free dishes" below any threshold that
keeps noise out, though the shared rare word is the best evidence there is.

The dense side reads the user's rows through the primary key and measures the distance to
every stored vector, exactly (a user's memories are capped, ``RETENTION_MEMORIES_PER_USER``;
10,000 cost ~6 ms). A memory without a vector (embedding failed when it was written) is found by
its words only. The lexical side ranks by ``ts_rank_cd`` against the stored full-text vector
(``search``), so no memory is parsed at query time; which memories it ranks depends on the
user's depth, never the answer:

- up to ``SHALLOW`` (1,000) memories, every memory sharing a word with the question, read
  from the user's rows;
- deeper, the memories holding each word of the question, through ``memories_words_idx``
  (migration 0014: a GIN index whose keys are a hash of the user id and a lexeme, so a word
  common among all users reads none of theirs; a GIN index on ``search`` over every user let
  the planner match a common word in every user's memories first). A word held by more than
  ``WORD_HOLDERS`` of the user's memories finds none of them alone: it still adds to the rank
  of the memories a rarer word of the question finds. Each word is read through the index up
  to one past that bound, so a question costs at most ``WORD_HOLDERS`` + 1 rows a word however
  deep the user, where ranking every memory sharing a common word cost ~40 ms at 10,000.

Up to ``WORD_HOLDERS`` memories no word can be held by more, so both ways find the same
memories; ``SHALLOW`` only picks the cheaper (tests/integration/memory/test_deep_search.py
compares them, and the bound against a ranking of every memory). A word that most of a deep
user's memories hold ("like" in "likes tea") orders a list of 40 by nothing but the tie-break
(the key): it is no evidence. Ties in either list go by key, so a search gives the same answer
every time.

A query's words are read from its first ``QUERY_MAX_CHARS`` characters
(:func:`llm_bot.db.hybrid.query_text`), the beginning the
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
from typing import Any, Protocol, TypeVar

from psycopg import AsyncConnection

from llm_bot.db.hybrid import SearchMode
from llm_bot.memory.memories import candidates
from llm_bot.telemetry.traces import memory_search

RRF_K = 60
# A word more of the user's memories hold than this finds none of them alone (it still ranks
# the memories a rarer word finds): at most this many rows read a word. The default retention
# keeps 1,000 memories a user, so there every word finds its memories.
WORD_HOLDERS = 1_000
# Up to this many memories the lexical side reads the user's rows; deeper, the word index.
# The same hits either way while SHALLOW <= WORD_HOLDERS. Rows were the cheaper up to the
# bound (bench data, 34 words: lexical p50 1.1 ms by rows, 1.3 by index at 300 memories; 2.4
# and 3.4 at 1,000); beyond it the index reads at most WORD_HOLDERS + 1 rows a word.
SHALLOW = WORD_HOLDERS


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
    dense_rank: int | None = None  # where each search ranked it (None: not found by it)
    lexical_rank: int | None = None


def rrf(*ranks: int | None) -> float:
    return sum(1.0 / (RRF_K + rank) for rank in ranks if rank is not None)


class Ranked(Protocol):
    @property
    def fused_score(self) -> float: ...

    @property
    def similarity(self) -> float: ...


R = TypeVar("R", bound=Ranked)


def best(hits: Iterable[R], limit: int) -> list[R]:
    """By fused rank, then similarity."""
    return sorted(hits, key=lambda hit: (-hit.fused_score, -hit.similarity))[:limit]


@memory_search("memories", lambda hits: [(hit.key, hit.fused_score) for hit in hits])
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
    rows = await candidates(
        connection,
        user_id,
        text,
        vector,
        pool=max(limit * 4, 20),
        mode=mode,
        include_private=include_private,
        shallow=SHALLOW,
        holders=WORD_HOLDERS,
    )
    hits = (
        MemoryHit(
            key=row.key,
            content=row.content,
            metadata=row.metadata,
            created_at=row.created_at,
            updated_at=row.updated_at,
            similarity=float(row.similarity),
            fused_score=rrf(row.dense_rank, row.lexical_rank),
            keyword_match=row.lexical_rank is not None,
            dense_rank=row.dense_rank,
            lexical_rank=row.lexical_rank,
        )
        for row in rows
    )
    return best((hit for hit in hits if hit.similarity >= threshold or hit.keyword_match), limit)
