"""The operator's and the evaluation's reads of the turns: an explanation's turns by id, the
console's newest turns and user search, and every stored turn for ``llm-bot eval``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row, tuple_row

# An explanation's turns by id (:mod:`llm_bot.explanation.reader`), whoever spoke them: a shared
# channel's window cites other speakers' turns. An operator's read, so every shard is asked.
_TURNS_BY_ID = """
SELECT t.thread_id, t.seq, t.pair_index, t.content, t.created_at FROM conversation_turns t
  JOIN unnest(%(threads)s::text[], %(seqs)s::bigint[]) AS id(thread_id, seq)
    ON t.thread_id = id.thread_id AND t.seq = id.seq
"""


async def turns_by_id(
    connection: AsyncConnection[Any], ids: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, str, datetime]]:
    """Each of the turns ``ids`` (thread, seq) stored now: its pair index (a summary's: the
    seq before the first turn it covers), words and time."""
    params = {"threads": [thread for thread, _ in ids], "seqs": [seq for _, seq in ids]}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_TURNS_BY_ID, params)
        return {
            (str(thread), int(seq)): (int(pair_index), str(content), created_at)
            for thread, seq, pair_index, content, created_at in await cursor.fetchall()
        }


# The operator console (:mod:`llm_bot.console`): a user's newest turns, from every thread, and
# the users whose id starts with a prefix (the ids in [start, end), read in the order of the
# ``(user_id, created_at)`` index, so a search reads the matching users' turns and stops).
_RECENT_TURNS_OF_USER = (
    "SELECT thread_id, seq, user_id, role, content, created_at, visibility, source_event"
    " FROM conversation_turns WHERE user_id = %(user)s"
    " ORDER BY created_at DESC, seq DESC LIMIT %(limit)s"
)
_USERS_BETWEEN = (
    "SELECT user_id FROM conversation_turns WHERE user_id >= %(start)s AND user_id < %(end)s"
    " GROUP BY user_id ORDER BY user_id LIMIT %(limit)s"
)

# Every turn of every user but session summaries (``llm-bot eval``'s scratch schema: the corpus
# read back as it was stored, to map each stored turn to its corpus id).
_STORED_TURNS = (
    "SELECT thread_id, seq, user_id, role, content, created_at, visibility, source_event"
    " FROM conversation_turns WHERE role <> 'summary'"
)


@dataclass(frozen=True)
class StoredTurn:
    """A turn as stored (its words possibly shortened), with the event that wrote it."""

    thread_id: str
    seq: int
    user_id: str
    role: str
    content: str
    created_at: datetime
    visibility: str
    source_event: str


async def recent_turns_of_user(
    connection: AsyncConnection[Any], user_id: str, limit: int
) -> list[StoredTurn]:
    """``user_id``'s newest ``limit`` turns, from every thread, newest first."""
    async with connection.cursor(row_factory=class_row(StoredTurn)) as cursor:
        await cursor.execute(_RECENT_TURNS_OF_USER, {"user": user_id, "limit": limit})
        return await cursor.fetchall()


async def users_between(
    connection: AsyncConnection[Any], start: str, end: str, limit: int
) -> list[str]:
    """Up to ``limit`` users with turns whose id is in [start, end), in order."""
    params = {"start": start, "end": end, "limit": limit}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_USERS_BETWEEN, params)
        return [str(user) for (user,) in await cursor.fetchall()]


async def stored_turns(connection: AsyncConnection[Any]) -> list[StoredTurn]:
    """Every turn of every user but session summaries."""
    async with connection.cursor(row_factory=class_row(StoredTurn)) as cursor:
        await cursor.execute(_STORED_TURNS)
        return await cursor.fetchall()
