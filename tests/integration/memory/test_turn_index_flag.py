"""Which turns enter recall's HNSW index (llm_bot/db/turn_index.py): an event's pair does when
recall found its user deep, through the graph and the commit as the worker runs them; a typical
user's never does. ``llm-bot maintain`` marks the older turns of a user who became deep
(llm_bot/lifecycle/turn_backfill.py)."""

from __future__ import annotations

import pytest
from psycopg.rows import tuple_row

from llm_bot.db.turn_index import LIVE_COLUMN, in_space
from llm_bot.events.inbound import inbound_of
from llm_bot.lifecycle.turn_backfill import index_deep_users
from llm_bot.llm.client import ModelClient
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.recall import DEEP_FROM
from llm_bot_tools.local.openai_server import LocalModelServer

from .conftest import Connection
from .graph_run import answerer_for, commit, said
from .test_recall_ranking import add

pytestmark = pytest.mark.integration


async def dimensions(store: MemoryStore) -> int:
    async with store.connection() as connection, connection.cursor(row_factory=tuple_row) as c:
        await c.execute("SELECT dimensions FROM embedding_space")
        row = await c.fetchone()
    assert row is not None
    return int(row[0])


async def in_index(store: MemoryStore, user: str, *, older: bool) -> list[bool]:
    """Whether each of ``user``'s turns matches the index's predicate: the older ones
    (:func:`past`) or the event's."""
    size = await dimensions(store)
    async with store.connection() as connection, connection.cursor(row_factory=tuple_row) as c:
        await c.execute(
            f"SELECT coalesce({in_space(LIVE_COLUMN, size)}, false) FROM conversation_turns"
            " WHERE user_id = %s AND (thread_id = %s) = %s ORDER BY seq",
            (user, f"{user}-past", older),
        )
        return [bool(flag) for (flag,) in await c.fetchall()]


async def past(store: MemoryStore, user: str, turns: int) -> None:
    """``turns`` older turns of ``user``, with vectors, unmarked (as COPY or an old writer)."""
    size = await dimensions(store)
    async with store.connection() as connection:
        await connection.execute(
            "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
            " role, content, created_at, source_event, embedding, visibility)"
            " SELECT %(thread)s, g, %(user)s, 1, (g + 1) / 2, 'user', 'old words ' || g,"
            " now() - interval '400 days' + g * interval '1 minute', %(thread)s || g,"
            " array_fill(0.1::real, ARRAY[%(size)s])::vector, 'public'"
            " FROM generate_series(1, %(turns)s) g",
            {"thread": f"{user}-past", "user": user, "size": size, "turns": turns},
        )


async def test_only_a_deep_users_pair_enters_the_index(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    """A typical user's new turns (a vector each) stay out of the index; a user past the depth
    (at least DEEP_FROM turns) has both turns of their pair in it, from recall's own count."""
    await past(memory_store, "deep-dora", DEEP_FROM)
    await past(memory_store, "typical-tom", 10)
    answerer = answerer_for(memory_store, model)
    for user in ("typical-tom", "deep-dora"):
        await commit(
            answerer, await answerer.answer(inbound_of(said(user, "lobby", "hello there")))
        )

    assert await in_index(memory_store, "typical-tom", older=False) == [False, False]
    assert await in_index(memory_store, "deep-dora", older=False) == [True, True]
    assert not any(await in_index(memory_store, "deep-dora", older=True))


async def test_maintain_marks_the_older_turns_of_deep_users_only(connection: Connection) -> None:
    """Every unmarked turn of a user at or past the depth, in batches smaller than their
    history; a user below it is left alone; a second run finds nothing left."""
    for number in range(12):
        await add(connection, "ada-thread", [("ada", f"ada says {number}")], first_seq=number + 1)
    for number in range(3):
        await add(connection, "bob-thread", [("bob", f"bob says {number}")], first_seq=number + 1)
    lines: list[str] = []

    assert await index_deep_users(connection, 5, lines.append, deep_from=10) == 12

    rows = await (
        await connection.execute(
            "SELECT user_id, bool_and(indexed) AS all_marked, bool_or(indexed) AS any_marked"
            " FROM conversation_turns GROUP BY user_id ORDER BY user_id"
        )
    ).fetchall()
    assert [(r["user_id"], r["all_marked"], r["any_marked"]) for r in rows] == [
        ("ada", True, True),
        ("bob", False, False),
    ]
    assert lines[-1] == "indexed 12 turn(s) of 1 deep user(s)"
    assert await index_deep_users(connection, 5, lines.append, deep_from=10) == 0
