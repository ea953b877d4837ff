"""Facts that change: the earlier texts of a memory, each with the period it was current.

A memory is current in ``memories``; rewriting it under its key (the model corrects
"vegetarian" to "vegan" by passing the key it was shown, or a near-duplicate is merged into it)
first copies the text it had into ``memory_versions`` with ``valid_from`` (when that text was
written) and ``valid_to`` (the rewrite's time). Context assembly reads only ``memories``, so a
retired text is never injected again, and ``llm-bot memories get --history`` shows how the fact
changed. Forgetting a memory (``deleteMemory``, ``llm-bot memories delete``) removes its
versions too: a user who asks us to forget something is not asking us to remember that they
once said it.

A derived memory's versions keep the turns each text cited (``sourceTurns``): recall's statement
(:mod:`llm_bot.memory.turns.recall`) reads them, so that a turn only a replaced text cites
trades places with the later turns the current text cites (:mod:`llm_bot.memory.fusion`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from llm_bot.db.rows import Rows
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.turns.rows import Taken

# Only a change of text makes a version: the same fact said again is no new version. A write
# whose time is before the text's own (an event that finished first but committed after another,
# its embedding slower) retires it at the text's time: periods never go back (memories.py's put
# keeps ``updated_at`` likewise).
_RETIRE_CURRENT = """
INSERT INTO memory_versions (user_id, key, version, content, metadata, visibility, valid_from,
                             valid_to)
SELECT m.user_id, m.key,
       coalesce((SELECT max(v.version) FROM memory_versions v
                  WHERE v.user_id = m.user_id AND v.key = m.key), 0) + 1,
       m.content, m.metadata, m.visibility, m.updated_at, greatest(m.updated_at, %(at)s)
  FROM memories m
 WHERE m.user_id = %(user)s AND m.key = %(key)s AND m.content IS DISTINCT FROM %(content)s
"""


# Retention's (:mod:`llm_bot.lifecycle.retention`): the earlier texts gone with their memory (a
# user's memories beyond the cap), or past the history's age.
_EXPIRED_VERSIONS = """
DELETE FROM memory_versions mv USING (
    SELECT user_id, key, version FROM memory_versions v
     WHERE v.valid_to < %(cutoff)s
        OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.user_id = v.user_id AND m.key = v.key)
     LIMIT %(batch)s) old
 WHERE mv.user_id = old.user_id AND mv.key = old.key AND mv.version = old.version
"""


async def delete_expired(connection: AsyncConnection[Any], cutoff: datetime, batch: int) -> int:
    """Up to ``batch`` earlier texts retired before ``cutoff`` or whose memory is gone."""
    params = {"cutoff": cutoff, "batch": batch}
    return (await connection.execute(_EXPIRED_VERSIONS, params)).rowcount


_ROWS_OF_USER = "FROM memory_versions WHERE user_id = %(user)s"


def rows_of_user(user_id: str) -> Rows:
    """A user's rows, as erasure deletes and export reads them (:mod:`llm_bot.lifecycle`)."""
    return Rows("memory_versions", _ROWS_OF_USER, {"user": user_id})


# The earlier texts consolidation derived from a thread (forget-thread), and from any of the
# taken turns (:mod:`llm_bot.lifecycle.provenance`), as :mod:`llm_bot.memory.memories` finds
# the current ones: a retired derived text still holds its sources' words.
def derived_of_thread(thread_id: str) -> Rows:
    """The earlier texts derived from ``thread_id``'s turns."""
    where = "FROM memory_versions WHERE metadata->>'derivedFrom' = %(thread)s"
    return Rows("memory_versions", where, {"thread": thread_id})


_DERIVED_FROM_TURNS = """
WITH taken AS MATERIALIZED (
    SELECT DISTINCT user_id, thread_id, seq::text AS seq
      FROM unnest(%(users)s::text[], %(threads)s::text[], %(seqs)s::bigint[])
        AS taken(user_id, thread_id, seq))
DELETE FROM memory_versions v USING taken
 WHERE v.user_id = taken.user_id AND v.metadata->>'derivedFrom' = taken.thread_id
   AND taken.seq = ANY(string_to_array(v.metadata->>'sourceTurns', ','))
"""


def cited_by_earlier_texts(turns: str) -> str:
    """Recall's rows (:mod:`llm_bot.memory.turns.recall`) of ``turns``, a relation of
    ``thread_id`` and ``seq``, that an earlier text of one of ``%(user)s``'s derived memories
    cites, each with that memory's key. Only the citations are read, never the words; seqs are
    compared as the metadata writes them."""
    return f"""
    SELECT DISTINCT {turns}.thread_id, {turns}.seq, v.key
    FROM memory_versions v
    CROSS JOIN LATERAL unnest(string_to_array(v.metadata->>'sourceTurns', ',')) AS cited(seq)
    JOIN {turns} ON {turns}.thread_id = v.metadata->>'derivedFrom' AND {turns}.seq::text = cited.seq
    WHERE v.user_id = %(user)s AND {turns}.seq > 0
"""


# The user's most recently retired earlier texts, newest first (the operator console shows
# them by memory; a fact rewritten daily for years must not make its page unbounded).
_VERSIONS_OF_USER = (
    f"SELECT key, version, content, metadata, visibility, valid_from, valid_to {_ROWS_OF_USER}"
    " ORDER BY valid_to DESC LIMIT %(limit)s"
)

# An explanation's memories' earlier texts (:mod:`llm_bot.explanation.reader`): the one written
# at a memory's time is the version the answer saw, the count numbers the current one.
_VERSIONS_OF_KEYS = """
SELECT key, version, content, metadata, visibility, valid_from, valid_to FROM memory_versions
 WHERE user_id = %(user)s AND key = ANY(%(keys)s)
"""


@dataclass(frozen=True)
class Version:
    version: int
    content: str
    metadata: dict[str, str]
    visibility: Visibility
    valid_from: datetime
    valid_to: datetime


async def retire_current(
    connection: AsyncConnection[Any], user_id: str, key: str, new_content: str, at: datetime
) -> None:
    """Keep the memory's current text as a version, in the caller's transaction, before it is
    overwritten with ``new_content`` at ``at``."""
    await connection.execute(
        _RETIRE_CURRENT, {"user": user_id, "key": key, "content": new_content, "at": at}
    )


async def forget_versions(connection: AsyncConnection[Any], user_id: str, key: str) -> None:
    await connection.execute(
        "DELETE FROM memory_versions WHERE user_id = %s AND key = %s", (user_id, key)
    )


async def versions_of(connection: AsyncConnection[Any], user_id: str, key: str) -> list[Version]:
    """Earlier texts of the memory, oldest first."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT version, content, metadata, visibility, valid_from, valid_to"
            " FROM memory_versions WHERE user_id = %s AND key = %s ORDER BY version",
            (user_id, key),
        )
        return [Version(**row) for row in await cursor.fetchall()]


async def delete_derived_from(connection: AsyncConnection[Any], taken: Taken) -> int:
    """The earlier texts derived from any of ``taken``; rows deleted."""
    cursor = await connection.execute(_DERIVED_FROM_TURNS, taken.params)
    return cursor.rowcount


async def recent_versions_of_user(
    connection: AsyncConnection[Any], user_id: str, limit: int
) -> dict[str, list[Version]]:
    """``user_id``'s most recently retired ``limit`` earlier texts, by memory key, each key's
    oldest first."""
    by_key: dict[str, list[Version]] = {}
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(_VERSIONS_OF_USER, {"user": user_id, "limit": limit})
        rows = await cursor.fetchall()
    for row in sorted(rows, key=lambda row: row["version"]):
        key = row.pop("key")
        by_key.setdefault(key, []).append(Version(**row))
    return by_key


async def versions_of_keys(
    connection: AsyncConnection[Any], user_id: str, keys: Sequence[str]
) -> dict[str, list[Version]]:
    """The earlier texts of the user's memories of ``keys``, by key."""
    by_key: dict[str, list[Version]] = {}
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(_VERSIONS_OF_KEYS, {"user": user_id, "keys": list(keys)})
        for row in await cursor.fetchall():
            by_key.setdefault(row.pop("key"), []).append(Version(**row))
    return by_key
