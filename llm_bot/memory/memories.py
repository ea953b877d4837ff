"""The ``memories`` table's statements, the one place its SQL is written and run: one user's
memory put, read, listed and deleted (:mod:`llm_bot.memory.store`), the hybrid search
(:mod:`llm_bot.memory.search`), the commit's lock of its keys, retention's cap, the re-embedding's
fill, erasure's rows and the legacy vectors' size. A change of the table's columns, keys or
shard routing (docs/citus.md) is made here; earlier texts are :mod:`llm_bot.memory.versions`'.

Every statement of the event's path names the user in its ``WHERE`` (or ``VALUES``), so Citus
sends it to that user's shard; retention's and the re-embedding's read every shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from llm_bot.db.hybrid import SearchMode, hybrid_rows
from llm_bot.db.missing_vectors import MissingVectors, Slot
from llm_bot.db.queries import Query, Row
from llm_bot.db.rows import Rows
from llm_bot.db.vectors import vector_param
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.turns.rows import Taken

# A rewrite replaces the vector: the one given (the live model's), or none when embedding
# failed; a vector the re-embedding made for the old text is stale either way. Its time never
# goes back: a write committed after another but timed before it is written at the other's
# time, where versions.py retired the other's text (the memory's periods follow each other).
_PUT = """
INSERT INTO memories AS m (user_id, key, content, metadata, visibility, embedding, created_at,
                           updated_at)
VALUES (%(user)s, %(key)s, %(content)s, %(metadata)s, %(visibility)s, %(vector)s::vector,
        %(at)s, %(at)s)
ON CONFLICT (user_id, key) DO UPDATE
   SET content = EXCLUDED.content, metadata = EXCLUDED.metadata,
       visibility = EXCLUDED.visibility, embedding = EXCLUDED.embedding, embedding_next = NULL,
       updated_at = greatest(m.updated_at, EXCLUDED.updated_at)
"""

_GET = """
SELECT key, content, metadata, visibility, created_at, updated_at
  FROM memories WHERE user_id = %s AND key = %s
"""

_LIST = """
SELECT key, content, metadata, visibility, created_at, updated_at
  FROM memories WHERE user_id = %s ORDER BY updated_at DESC, key LIMIT %s OFFSET %s
"""


@dataclass(frozen=True)
class Memory:
    key: str
    content: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    visibility: Visibility = "dm"

    def visible_in(self, scope: Visibility) -> bool:
        """Whether a run in ``scope`` may see or touch it: in a DM all, in public the public."""
        return scope == "dm" or self.visibility == "public"


def _memory_of(row: dict[str, Any]) -> Memory:
    return Memory(
        key=row["key"],
        content=row["content"],
        metadata=row["metadata"],
        created_at=row["created_at"].isoformat(),
        updated_at=row["updated_at"].isoformat(),
        visibility=row["visibility"],
    )


async def put(
    connection: AsyncConnection[Any],
    user_id: str,
    key: str,
    content: str,
    metadata: dict[str, str],
    visibility: Visibility,
    vector: list[float] | None,
    at: datetime,
) -> None:
    """The memory written under ``key``, replacing what the key held."""
    params = {
        "user": user_id,
        "key": key,
        "content": content,
        "metadata": Jsonb(metadata),
        "visibility": visibility,
        "vector": vector_param(vector),
        "at": at,
    }
    await connection.execute(_PUT, params)


async def get(connection: AsyncConnection[Any], user_id: str, key: str) -> Memory | None:
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(_GET, (user_id, key))
        row = await cursor.fetchone()
    return None if row is None else _memory_of(row)


async def list_of_user(
    connection: AsyncConnection[Any], user_id: str, limit: int, offset: int
) -> list[Memory]:
    """The most recently written first."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(_LIST, (user_id, limit, offset))
        return [_memory_of(row) for row in await cursor.fetchall()]


# Full-text: the query's lexemes OR-ed together, so a question matches any of its words.
OR_TERMS = """to_tsquery('simple', coalesce(array_to_string(array(
    SELECT quote_literal(lexeme)
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
), ' | '), ''))"""

# The question's words as keys of ``memories_words_idx`` (migration 0014): a hash of the user
# id, a space, the lexeme; the same key ``memory_words(user_id, content)`` gives a memory's.
WORD_KEYS = """array(
    SELECT md5(%(user)s) || ' ' || lexeme
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
)"""

_HYBRID_SEARCH = f"""
WITH query AS MATERIALIZED (SELECT {OR_TERMS} AS terms WHERE %(use_lexical)s),
-- How many memories the user has, counted up to one past the depth that takes the index.
depth AS MATERIALIZED (
    SELECT count(*) AS memories
    FROM (SELECT FROM memories WHERE user_id = %(user)s LIMIT %(shallow)s + 1) AS memory
),
dense AS (
    SELECT key, row_number() OVER (ORDER BY distance, key) AS rank
    FROM (
        SELECT key, embedding <=> %(vector)s::vector AS distance
        FROM memories
        WHERE user_id = %(user)s AND embedding IS NOT NULL AND %(use_dense)s
          AND (%(include_private)s OR visibility = 'public')
        ORDER BY distance, key
        LIMIT %(pool)s
    ) AS nearest
),
-- A shallow user: every memory sharing a word, from the user's rows (no word can have more
-- holders than the user has memories, so none is too common).
scanned AS (
    SELECT key, search FROM memories, query
    WHERE %(use_lexical)s AND (SELECT memories FROM depth) <= least(%(shallow)s, %(holders)s)
      AND user_id = %(user)s AND search @@ query.terms
      AND (%(include_private)s OR visibility = 'public')
),
-- A deep user: per word of the question, the memories holding it, through the index and up
-- to one past WORD_HOLDERS, so a common word costs at most that many rows. The key names the
-- user (an md5 of the id); the user's own id is checked too, inside the subquery so that
-- Citus sends the statement to the user's shard, and under COLLATE "C" (the same equality
-- for ids) so that the primary key's index, of the database's collation, is not read beside
-- the word index (every row of a deep user).
held AS MATERIALIZED (
    SELECT holder.key, holder.search, holder.visibility,
           count(*) OVER (PARTITION BY word) AS holders
    FROM unnest({WORD_KEYS}) AS word, LATERAL (
        SELECT key, search, visibility FROM memories
        WHERE memory_words(user_id, content) @> ARRAY[word] AND user_id = %(user)s COLLATE "C"
        LIMIT %(holders)s + 1
    ) AS holder
    WHERE %(use_lexical)s AND (SELECT memories FROM depth) > least(%(shallow)s, %(holders)s)
),
found AS (
    SELECT key, search FROM scanned
    UNION ALL
    SELECT DISTINCT ON (key) key, search FROM held
    WHERE holders <= %(holders)s AND (%(include_private)s OR visibility = 'public')
),
lexical AS (
    SELECT key, row_number() OVER (ORDER BY score DESC, key) AS rank
    FROM (
        SELECT key, ts_rank_cd(search, query.terms) AS score FROM found, query
        ORDER BY score DESC, key
        LIMIT %(pool)s
    ) AS best
)
SELECT m.key, m.content, m.metadata, m.created_at, m.updated_at,
       coalesce(1 - (m.embedding <=> %(vector)s::vector), 0) AS similarity,
       dense.rank AS dense_rank, lexical.rank AS lexical_rank
FROM (SELECT key FROM dense UNION SELECT key FROM lexical) hit
JOIN memories m ON m.user_id = %(user)s AND m.key = hit.key
LEFT JOIN dense ON dense.key = hit.key
LEFT JOIN lexical ON lexical.key = hit.key
"""


class MemoryCandidate(NamedTuple):
    """A memory the hybrid search found, with its similarity to the query and where each side
    ranked it (None: not found by that side)."""

    key: str
    content: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime
    similarity: float
    dense_rank: int | None
    lexical_rank: int | None


async def candidates(
    connection: AsyncConnection[Any],
    user_id: str,
    text: str,
    vector: list[float],
    *,
    pool: int,
    mode: SearchMode,
    include_private: bool,
    shallow: int,
    holders: int,
) -> list[MemoryCandidate]:
    """The user's ``pool`` nearest memories and ``pool`` best by their words
    (:mod:`llm_bot.memory.search` says how ``shallow`` and ``holders`` bound them)."""
    scope = {
        "user": user_id,
        "include_private": include_private,
        "holders": holders,
        "shallow": shallow,
    }
    return await hybrid_rows(
        connection, _HYBRID_SEARCH, MemoryCandidate, scope, text, vector, pool, mode
    )


# Retention's cap (:mod:`llm_bot.lifecycle.retention`): the users holding more memories.
_USERS_OVER_CAP = """
SELECT user_id FROM memories GROUP BY user_id HAVING count(*) > %(cap)s
"""


async def users_over_cap(connection: AsyncConnection[Any], cap: int) -> list[str]:
    """The users holding more than ``cap`` memories."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_USERS_OVER_CAP, {"cap": cap})
        return [str(user) for (user,) in await cursor.fetchall()]


# The most recently created beyond the cap. The cap is also enforced at write time (a new
# memory beyond it is refused), so rows beyond it come from a lowered cap or concurrent writes;
# the user's first facts stand, as at write time, and a flood of new rows (a steered model) is
# what goes, never the older genuine ones.
_BEYOND_CAP = """
DELETE FROM memories m USING (
    SELECT key FROM memories WHERE user_id = %(user)s
     ORDER BY created_at, key OFFSET %(cap)s LIMIT %(batch)s) old
 WHERE m.user_id = %(user)s AND m.key = old.key
"""


async def delete_beyond_cap(
    connection: AsyncConnection[Any], user_id: str, cap: int, batch: int
) -> int:
    """Up to ``batch`` of ``user_id``'s memories beyond ``cap``; rows deleted."""
    params = {"user": user_id, "cap": cap, "batch": batch}
    return (await connection.execute(_BEYOND_CAP, params)).rowcount


async def count_of_user(connection: AsyncConnection[Any], user_id: str) -> int:
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute("SELECT count(*) FROM memories WHERE user_id = %s", (user_id,))
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def delete(connection: AsyncConnection[Any], user_id: str, key: str) -> bool:
    """Whether the memory was there."""
    cursor = await connection.execute(
        "DELETE FROM memories WHERE user_id = %s AND key = %s", (user_id, key)
    )
    return cursor.rowcount > 0


# The memories an event's commit writes or deletes, and those holding the text of a memory it
# creates, locked in key order (two commits lock theirs in one order, so neither waits on the
# other in a cycle).
_LOCK_KEYS = """
SELECT key, visibility, content FROM memories
 WHERE user_id = %s AND (key = ANY(%s) OR content = ANY(%s)) ORDER BY key FOR UPDATE
"""


class Held(NamedTuple):
    """A memory an event's commit holds locked: its key, where it was learned, its text."""

    key: str
    visibility: Visibility
    content: str


async def lock_keys(
    connection: AsyncConnection[Any], user_id: str, keys: Sequence[str], texts: Sequence[str]
) -> list[Held]:
    """The user's memories of ``keys`` and those whose text is one of ``texts``, their rows
    locked until the caller's transaction ends. A commit of another worker that writes or
    deletes one of them waits, and its next statement reads what this one left: the version it
    numbers after, the text it keeps, or no memory at all (one forgotten keeps no earlier
    text)."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_LOCK_KEYS, (user_id, list(keys), list(texts)))
        return [Held(*row) for row in await cursor.fetchall()]


# One memory's vector size and one history vector's, of the vectors stored before their model
# was recorded (:func:`llm_bot.memory.store.settle_space`).
_LEGACY_DIMENSIONS = (
    "(SELECT vector_dims(embedding) FROM memories WHERE embedding IS NOT NULL LIMIT 1)"
    " UNION ALL (SELECT vector_dims(embedding) FROM conversation_turns"
    "            WHERE embedding IS NOT NULL LIMIT 1)"
)


async def legacy_dimensions(connection: AsyncConnection[Any]) -> list[int]:
    """Sizes of the vectors stored before the model was recorded: one memory's and one history
    vector's."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_LEGACY_DIMENSIONS)
        return [int(row[0]) for row in await cursor.fetchall()]


# The re-embedding's (:mod:`llm_bot.lifecycle.vector_slots`) over the memories without a vector
# in the slot ``{c}``: their count, a page of them in key order after a key (user, key), and
# the write of one's vector, only while the memory still has the text that was embedded.
_MISSING_VECTORS = (
    "SELECT count(*) FROM memories WHERE {c} IS NULL",
    "SELECT user_id, key, content FROM memories"
    " WHERE {c} IS NULL AND (user_id, key) > (%s, %s)"
    " ORDER BY user_id, key LIMIT %s",
    "UPDATE memories SET {c} = %s::vector"
    " WHERE user_id = %s AND key = %s AND content = %s AND {c} IS NULL",
)


def missing_vectors(slot: Slot) -> MissingVectors:
    """The memories without a vector in ``slot``, keyed (user, key)."""
    return MissingVectors.of("memories", ("", ""), _MISSING_VECTORS, slot)


def rows_of_user(user_id: str) -> Rows:
    """A user's rows, as erasure deletes and export reads them (:mod:`llm_bot.lifecycle`)."""
    return Rows("memories", "FROM memories WHERE user_id = %(user)s", {"user": user_id})


# The memories consolidation derived from any of the taken turns (users, threads and seqs side
# by side; :mod:`llm_bot.lifecycle.provenance`): a fact goes when a turn it cites goes. The
# turns are a result of their own (materialized), which Citus joins with each user's shard.
_DERIVED_FROM_TURNS = """
WITH taken AS MATERIALIZED (
    SELECT DISTINCT user_id, thread_id, seq::text AS seq
      FROM unnest(%(users)s::text[], %(threads)s::text[], %(seqs)s::bigint[])
        AS taken(user_id, thread_id, seq))
DELETE FROM memories m USING taken
 WHERE m.user_id = taken.user_id AND m.metadata->>'derivedFrom' = taken.thread_id
   AND taken.seq = ANY(string_to_array(m.metadata->>'sourceTurns', ','))
"""


# The memories consolidation derived from a thread's turns (:mod:`llm_bot.consolidation` names
# the thread in their metadata), which go when the thread is forgotten, as its turns do.
def derived_of_thread(thread_id: str) -> Rows:
    """The memories derived from ``thread_id``'s turns."""
    where = "FROM memories WHERE metadata->>'derivedFrom' = %(thread)s"
    return Rows("memories", where, {"thread": thread_id})


def replacing_turns(earlier: str) -> str:
    """Recall's rows (:mod:`llm_bot.memory.turns.recall`): for each turn of ``earlier`` (its
    ``thread_id``, ``seq`` and the ``key`` of a memory whose earlier text cites it), the turns
    that memory's current text cites (``by_thread``, ``by_seq``), unless a current memory of
    ``%(user)s`` still cites the earlier turn. A cited seq that is no number is skipped."""
    return f"""
    SELECT DISTINCT {earlier}.thread_id, {earlier}.seq, m.metadata->>'derivedFrom' AS by_thread,
           CASE WHEN cur.seq ~ '^[0-9]{{1,18}}$' THEN cur.seq::bigint END AS by_seq
    FROM {earlier}
    JOIN memories m ON m.user_id = %(user)s AND m.key = {earlier}.key
    CROSS JOIN LATERAL unnest(string_to_array(m.metadata->>'sourceTurns', ',')) AS cur(seq)
    WHERE m.metadata->>'derivedFrom' IS NOT NULL AND cur.seq ~ '^[0-9]{{1,18}}$'
      AND NOT EXISTS (
          SELECT FROM memories c
          WHERE c.user_id = %(user)s AND c.metadata->>'derivedFrom' = {earlier}.thread_id
            AND {earlier}.seq::text = ANY(string_to_array(c.metadata->>'sourceTurns', ','))
      )
"""


# The user's memories learned in DMs, counted up to ``candidates`` when ``withheld`` (a shared
# channel that may not show them): what an answer's explanation counts as left out for being of
# another scope. One row always (an aggregate), so context assembly reads it with the notes and
# the window in one statement (:func:`llm_bot.memory.notes_store.read_notes_and_window`). The
# inner query selects a column: Citus plans the LIMIT apart, and a result of no columns is one it
# cannot read back.
_PRIVATE_COUNT = """
SELECT count(*) AS private_memories FROM (
    SELECT 1 FROM memories WHERE user_id = %(user_id)s AND visibility = 'dm' AND %(withheld)s
     LIMIT %(candidates)s) AS private
"""


def private_memories_query(user_id: str, *, withheld: bool, candidates: int) -> Query[int]:
    """The count of the user's memories learned in DMs, up to ``candidates``; 0 unless
    ``withheld``."""
    params = {"user_id": user_id, "withheld": withheld, "candidates": candidates}
    return Query(_PRIVATE_COUNT, params, 1, _count_of)


def _count_of(rows: list[Row]) -> int:
    return int(rows[0][0]) if rows else 0


# An explanation's memories as they are now (:mod:`llm_bot.explanation.reader`), by key.
_CURRENT_OF_KEYS = """
SELECT key, content, metadata, updated_at FROM memories
 WHERE user_id = %(user)s AND key = ANY(%(keys)s)
"""


@dataclass(frozen=True)
class CurrentText:
    """A memory's text as it is now, and when it was written."""

    content: str
    metadata: dict[str, Any]
    updated_at: datetime


async def current_of_keys(
    connection: AsyncConnection[Any], user_id: str, keys: Sequence[str]
) -> dict[str, CurrentText]:
    """The user's memories of ``keys`` as they are now, by key (a forgotten one is missing)."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(_CURRENT_OF_KEYS, {"user": user_id, "keys": list(keys)})
        return {row.pop("key"): CurrentText(**row) for row in await cursor.fetchall()}


async def delete_derived_from(connection: AsyncConnection[Any], taken: Taken) -> int:
    """The memories derived from any of ``taken``; rows deleted."""
    cursor = await connection.execute(_DERIVED_FROM_TURNS, taken.params)
    return cursor.rowcount
