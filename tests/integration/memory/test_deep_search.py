"""Memory search takes another path for a deep user (the word index instead of the user's rows,
:mod:`llm_bot.memory.search`): on the same memories both paths must give the same candidates
and ranks, and a word too common to find memories alone must leave exactly the memories that
rarer words of the question find, ranked as the full-text ranking ranks them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llm_bot.db.hybrid import SearchMode
from llm_bot.memory import memories
from llm_bot.memory.search import SHALLOW, WORD_HOLDERS
from llm_bot.memory.store import put_memory

from .conftest import Connection

pytestmark = pytest.mark.integration
AT = datetime(2026, 3, 1, tzinfo=UTC)
# Keys sort alike by code point and by any collation, so the reference below can sort them.
MEMORIES = [
    ("k01", "Drinks coffee every morning before work", "dm"),
    ("k02", "Likes coffee with oat milk", "public"),
    ("k03", "Coffee beans from Lisbon, coffee again in the evening", "dm"),
    ("k04", "Green tea after lunch, never coffee", "public"),
    ("k05", "Tea ceremony lessons on Sundays", "dm"),
    ("k06", "Plays chess with a coffee", "public"),
    ("k07", "Allergic to peanuts", "dm"),
    ("k08", "Visited Lisbon in May", "public"),
    ("k09", "Works as a nurse in Porto", "dm"),
    ("k10", "Coffee and chess club on Fridays", "public"),
]
QUERIES = [
    "coffee or tea in Lisbon?",
    "who plays chess",
    "anything about peanuts and coffee",
    "the weather",
]


def vector(index: int) -> list[float]:
    """Distinct directions, so no two memories tie on distance."""
    return [1.0, index / 10, (index * index) % 7 / 7]


async def remember(connection: Connection, user: str) -> None:
    for index, (key, content, visibility) in enumerate(MEMORIES):
        await put_memory(connection, user, key, content, {}, visibility, vector(index), AT)


async def candidates(
    connection: Connection, user: str, text: str, mode: SearchMode, **depth: Any
) -> list[tuple[str, int | None, int | None]]:
    bounds = {"shallow": SHALLOW, "holders": WORD_HOLDERS, **depth}
    rows = await memories.candidates(
        connection, user, text, [0.3, 0.9, 0.1], pool=4, mode=mode, include_private=True, **bounds
    )
    return sorted((row.key, row.dense_rank, row.lexical_rank) for row in rows)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "lexical"])
@pytest.mark.parametrize("include_private", [True, False])
async def test_the_index_path_gives_the_hits_of_reading_the_rows(
    connection: Connection, mode: SearchMode, include_private: bool
) -> None:
    await remember(connection, "deep-ana")
    await remember(connection, "other-bo")  # the same words under another user
    for text in QUERIES:
        by_rows, by_index = [
            sorted(
                await memories.candidates(
                    connection,
                    "deep-ana",
                    text,
                    [0.3, 0.9, 0.1],
                    pool=4,
                    mode=mode,
                    include_private=include_private,
                    shallow=shallow,
                    holders=WORD_HOLDERS,
                ),
                key=lambda row: row.key,
            )
            for shallow in (SHALLOW, 0)  # the user's rows, the word index
        ]
        assert by_index == by_rows, text
        assert all(row.key in {key for key, _, _ in MEMORIES} for row in by_rows)
        if not include_private:
            public = {key for key, _, visibility in MEMORIES if visibility == "public"}
            assert {row.key for row in by_rows} <= public
    # The comparison saw words rank: a query sharing no word finds nothing by its words.
    assert await candidates(connection, "deep-ana", "coffee", "lexical", shallow=0) != []
    assert await candidates(connection, "deep-ana", "the weather", "lexical", shallow=0) == []


async def test_a_word_more_memories_hold_than_the_bound_finds_none_alone(
    connection: Connection,
) -> None:
    await remember(connection, "deep-ana")
    # coffee: six holders; tea: two; lisbon: two. With a bound of three, coffee finds none
    # alone, but ranks the memories tea and lisbon find (k03 holds coffee twice and lisbon).
    found = await candidates(
        connection, "deep-ana", "coffee or tea in Lisbon?", "lexical", shallow=0, holders=3
    )
    assert found == [
        ("k03", None, 1),
        ("k04", None, 2),
        ("k05", None, 3),
        ("k08", None, 4),
    ]
    # Only common words: nothing by words; with the bound above six, coffee finds its holders.
    assert await candidates(connection, "deep-ana", "coffee", "lexical", holders=3) == []
    # k03 holds coffee twice; the other three by key (the pool is four).
    assert await candidates(connection, "deep-ana", "coffee", "lexical", shallow=0, holders=6) == [
        ("k01", None, 2),
        ("k02", None, 3),
        ("k03", None, 1),
        ("k04", None, 4),
    ]


async def test_the_bound_leaves_the_full_text_ranking_of_what_rarer_words_find(
    connection: Connection,
) -> None:
    """Against the exact computation: every memory scored by ``ts_rank_cd``, the words'
    holders counted over all of them, in Python."""
    await remember(connection, "deep-ana")
    rows = await (
        await connection.execute(
            "SELECT key, tsvector_to_array(search) AS words,"
            " ts_rank_cd(search, to_tsquery('simple', 'coffe | tea | lisbon | chess')) AS score"
            " FROM memories WHERE user_id = 'deep-ana'"
        )
    ).fetchall()
    query_words = {"coffe", "tea", "lisbon", "chess"}  # english stems of the question below
    for bound in (1, 2, 3, 6, 100):
        holders = {w: sum(w in row["words"] for row in rows) for w in query_words}
        telling = {w for w, count in holders.items() if count <= bound}
        found = [row for row in rows if telling & set(row["words"])]
        expected = sorted(found, key=lambda row: (-row["score"], row["key"]))[:4]
        got = await candidates(
            connection,
            "deep-ana",
            "coffee, tea, Lisbon or chess?",
            "lexical",
            shallow=0,
            holders=bound,
        )
        assert got == sorted((row["key"], None, rank) for rank, row in enumerate(expected, 1)), (
            bound
        )
    assert got != [], "the widest bound finds memories"
