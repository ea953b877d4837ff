"""A deep user's recall takes other paths (llm_bot/memory/recall.py): nearest turns from the
HNSW index instead of an exact scan, and the lexical side over the most recent turns only. Each
returns what the exact computation returns wherever the two are defined to agree; the paths are
taken over a few turns by moving the depths (``Depth``) instead of loading thousands.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from psycopg.rows import tuple_row

from llm_bot.db.hybrid import SearchMode
from llm_bot.db.turn_index import (
    LIVE_COLUMN,
    SEARCH_SETTINGS,
    ensure_index,
    in_space,
    near_distance,
)
from llm_bot.db.vectors import vector_param
from llm_bot.memory.recall import MIN_POOL, Depth, RecalledTurn, recall, recall_turns

from .conftest import Connection
from .test_recall_ranking import add

pytestmark = pytest.mark.integration
DIMENSIONS = 8
TOPICS = ["tea", "jazz", "chess", "sailing", "violin", "tennis", "garden", "sushi"]
DEEP = Depth(deep_from=0)  # every user takes the deep paths
EXACT = Depth(deep_from=10**9, lexical_window=10**9)  # no user does


def direction(index: int, turn: int) -> list[float]:
    """A unit vector near the axis of topic ``index``, distinct per ``turn``."""
    vector = [0.05 * math.sin(turn * (axis + 1)) for axis in range(DIMENSIONS)]
    vector[index] = 1.0
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


async def history(connection: Connection, user: str, turns: int, threads: int = 2) -> None:
    """``turns`` turns of ``user`` over ``threads`` threads, each about one topic, a vector
    near it."""
    for turn in range(turns):
        topic = (turn * 3) % len(TOPICS)
        await add(
            connection,
            f"{user}-thread-{turn % threads}",
            [(user, f"{user} talks about {TOPICS[topic]} number {turn}")],
            vector=direction(topic, turn),
            first_seq=turn // threads + 1,
        )


async def recalled(
    connection: Connection, user: str, words: str, depth: Depth, mode: SearchMode = "lexical"
) -> list[tuple[str, int, float]]:
    """(thread, seq, fused score) of the five turns recalled for a question about ``words``
    (its vector near the first topic it names, or the last axis)."""
    topic = next((i for i, t in enumerate(TOPICS) if t in words.split()), DIMENSIONS - 1)
    turns: list[RecalledTurn] = await recall_turns(
        connection,
        user,
        f"what about {words}?",
        direction(topic, 1000),
        exclude=(),
        limit=5,
        threshold=-1.0,
        mode=mode,
        depth=depth,
    )
    return [(turn.thread_id, turn.seq, round(turn.fused_score, 9)) for turn in turns]


async def uses_index(connection: Connection) -> None:
    """The index of the test's size, walked as the worker's connections walk it, and preferred
    to a scan, which over a few hundred rows is cheaper: the test is of the index's answers."""
    await connection.execute("SELECT set_config(%s, %s, false)", SEARCH_SETTINGS)
    await connection.execute("SET enable_seqscan = off; SET enable_sort = off")
    assert await ensure_index(connection, DIMENSIONS)


async def test_a_deep_user_whose_turns_the_index_can_all_return_gets_the_exact_answer(
    connection: Connection,
) -> None:
    """The index is approximate, but a user with fewer turns than the deep dense side's pool
    (20 for five turns: half a side's MIN_POOL of 40) must get every one of them from it (the
    scan goes on until the pool is full or the index is exhausted), and then each is scored
    exactly: the same turns, the same scores, in every mode. Other users' turns fill the index
    around them."""
    await uses_index(connection)
    for other in range(6):
        await history(connection, f"other-{other}", 40)
    await history(connection, "ada", 16, threads=16)  # no turn brings in a neighbour
    await connection.execute("UPDATE conversation_turns SET indexed = true")
    for topic in range(len(TOPICS)):
        for mode in ("hybrid", "dense", "lexical"):
            exact = await recalled(connection, "ada", TOPICS[topic], EXACT, mode=mode)
            assert exact, (topic, mode)
            assert await recalled(connection, "ada", TOPICS[topic], DEEP, mode=mode) == exact


async def test_a_deep_users_dense_side_ranks_half_the_pool(connection: Connection) -> None:
    """The index walk's cost is its pool's, so a deep user's nearest turns are half of what a
    side ranks; the exact scan, whose cost is the user's turns, ranks them all."""
    await uses_index(connection)
    await history(connection, "ada", 2 * MIN_POOL, threads=2 * MIN_POOL)  # no neighbours
    await connection.execute("UPDATE conversation_turns SET indexed = true")
    found = {}
    for name, depth in (("deep", DEEP), ("exact", EXACT)):
        result = await recall(
            connection,
            "ada",
            "what about tea?",
            direction(0, 1000),
            exclude=(),
            limit=None,
            threshold=-1.0,
            mode="dense",
            depth=depth,
        )
        found[name] = len(result.turns)
    assert found == {"deep": MIN_POOL // 2, "exact": MIN_POOL}


async def test_the_index_serves_the_deep_dense_side(connection: Connection) -> None:
    """The statement's ordering and filter are the index's expression and predicate, or the
    planner could not use it at all (when it is chosen over a scan is the bench's to show)."""
    await uses_index(connection)
    await history(connection, "ada", 30)
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(
            "EXPLAIN SELECT thread_id FROM conversation_turns"
            f" WHERE user_id = 'ada' AND {in_space(LIVE_COLUMN, DIMENSIONS)}"
            f" ORDER BY {near_distance(LIVE_COLUMN, DIMENSIONS)} LIMIT 20",
            {"vector": vector_param(direction(1, 5))},
        )
        plan = "\n".join(row[0] for row in await cursor.fetchall())
    assert "conversation_turns_embedding_8_hnsw" in plan


async def test_within_its_window_the_lexical_side_ranks_as_the_exact_one(
    connection: Connection,
) -> None:
    """A deep user's words are matched among their most recent turns only: with no older turn
    holding a word of the question, the ranking is the exact one (the BM25 statistics are read
    from the same recent turns either way); an older turn holding it is left to the dense
    side."""
    await history(connection, "ada", 40)  # seq 1-20 of each thread, every topic many times
    await add(connection, "ada-old", [("ada", "the harpsichord recital")], vector=direction(0, 99))
    await connection.execute(  # a time as a value: Citus refuses timestamptz arithmetic here
        "UPDATE conversation_turns SET created_at = %s WHERE thread_id = 'ada-old'",
        (datetime(2000, 1, 1, tzinfo=UTC),),
    )
    window = Depth(lexical_window=40)  # the 40 recent turns, not the old one
    for topic in range(len(TOPICS)):
        exact = await recalled(connection, "ada", TOPICS[topic], EXACT, mode="lexical")
        assert exact
        assert await recalled(connection, "ada", TOPICS[topic], window, mode="lexical") == exact
    harpsichord = await recalled(connection, "ada", "the harpsichord", EXACT)
    assert [thread for thread, _, _ in harpsichord] == ["ada-old"]
    assert await recalled(connection, "ada", "the harpsichord", window) == []


async def test_a_deep_user_with_turns_in_and_out_of_the_index_gets_the_exact_answer(
    connection: Connection,
) -> None:
    """Turns written before their user was deep are not in the index until maintain marks them:
    the deep path reads them exactly beside the index. Half of ada's turns marked (every topic
    of the other half unmarked): the same turns and scores as the exact computation."""
    await uses_index(connection)
    for other in range(6):
        await history(connection, f"other-{other}", 40)
    await connection.execute("UPDATE conversation_turns SET indexed = true")
    await history(connection, "ada", 16, threads=16)
    await connection.execute(
        "UPDATE conversation_turns SET indexed = true WHERE user_id = 'ada' AND seq = 1"
        " AND right(thread_id, 1) IN ('0', '2', '4', '6', '8')"
    )
    marked = await (
        await connection.execute(
            "SELECT count(*) FILTER (WHERE indexed) AS marked, count(*) AS turns"
            " FROM conversation_turns WHERE user_id = 'ada'"
        )
    ).fetchone()
    assert marked is not None
    assert 0 < marked["marked"] < marked["turns"]
    for topic in range(len(TOPICS)):
        for mode in ("hybrid", "dense"):
            exact = await recalled(connection, "ada", TOPICS[topic], EXACT, mode=mode)
            assert exact, (topic, mode)
            assert await recalled(connection, "ada", TOPICS[topic], DEEP, mode=mode) == exact


async def test_recall_says_whether_the_user_was_deep(connection: Connection) -> None:
    """What the writer marks the event's pair by."""
    await history(connection, "ada", 6)
    for depth, deep in ((DEEP, True), (EXACT, False)):
        found = await recall(
            connection,
            "ada",
            "what about tea?",
            direction(0, 1000),
            exclude=(),
            limit=5,
            threshold=-1.0,
            depth=depth,
        )
        assert found.turns
        assert found.deep is deep
