"""Migration 0015 on a database that has run the worker: the history index of the recorded
embedding space is built (the definition of llm_bot/db/turn_index.py, so the worker's query
uses it), and the full-text index no query reads is gone. On a database that has recorded no
space yet, the worker builds the index as it records one (llm_bot/memory/store.py)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from llm_bot.db.migrate import migrate
from llm_bot.db.turn_index import index_name
from llm_bot.memory.store import settle_space
from llm_bot.memory.turns.recall import DEEP_FROM

from .todays_form import migrate_through

pytestmark = pytest.mark.integration


def turn_indexes(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'conversation_turns'"
        ).fetchall()
    return {name for (name,) in rows}


def test_a_recorded_space_gets_its_index_and_the_full_text_index_goes(
    fresh_database_url: str,
) -> None:
    migrate_through(fresh_database_url, 13)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        connection.execute("INSERT INTO embedding_space (model, dimensions) VALUES ('m', 768)")
    assert "conversation_turns_search_idx" in turn_indexes(fresh_database_url)

    migrate(fresh_database_url)

    indexes = turn_indexes(fresh_database_url)
    assert index_name("embedding", 768) in indexes
    assert "conversation_turns_search_idx" not in indexes


def test_a_space_recorded_after_migrating_gets_its_index_then(fresh_database_url: str) -> None:
    migrate(fresh_database_url)
    assert not any(name.endswith("_hnsw") for name in turn_indexes(fresh_database_url))

    async def first_start() -> None:
        async with await psycopg.AsyncConnection.connect(
            fresh_database_url, autocommit=True
        ) as connection:
            await settle_space(connection, "m", 384)

    asyncio.run(first_start())
    assert index_name("embedding", 384) in turn_indexes(fresh_database_url)


def test_migration_0018_keeps_only_flagged_turns_in_the_index(fresh_database_url: str) -> None:
    """The index of 0015 held every turn; 0018 builds it again with the flag in its predicate,
    flagging first the turns of users at DEEP_FROM turns or more (a typical user's stay out),
    and drops the index of an unfinished reembed, which that command builds again."""
    migrate_through(fresh_database_url, 13)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        connection.execute("INSERT INTO embedding_space (model, dimensions) VALUES ('m', 8)")
    migrate_through(fresh_database_url, 17)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        for user, turns in (("deep", DEEP_FROM), ("typical", DEEP_FROM - 1)):
            connection.execute(
                "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
                " role, content, created_at, source_event)"
                " SELECT %(user)s, g, %(user)s, 1, g / 2, 'user', 'words', now(), %(user)s || g"
                " FROM generate_series(1, %(turns)s) g",
                {"user": user, "turns": turns},
            )
    shadow = index_name("embedding_next", 8)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        connection.execute(
            f"CREATE INDEX {shadow} ON conversation_turns USING hnsw"
            " ((embedding_next::halfvec(8)) halfvec_cosine_ops)"
            " WHERE vector_dims(embedding_next) = 8"
        )

    migrate(fresh_database_url)

    with psycopg.connect(fresh_database_url) as connection:
        rows = connection.execute(
            "SELECT indexname, indexdef FROM pg_indexes"
            " WHERE tablename = 'conversation_turns' AND indexname LIKE '%%_hnsw'"
        ).fetchall()
    assert [name for name, _ in rows] == [index_name("embedding", 8)]
    assert "WHERE (indexed AND (vector_dims(embedding) = 8))" in rows[0][1]
    with psycopg.connect(fresh_database_url) as connection:
        flags = connection.execute(
            "SELECT user_id, bool_and(indexed), bool_or(indexed) FROM conversation_turns"
            " GROUP BY user_id ORDER BY user_id"
        ).fetchall()
    assert flags == [("deep", True, True), ("typical", False, False)]
