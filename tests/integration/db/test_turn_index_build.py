"""Instances starting together build recall's index once: each finds the others' build or
waits for it, none drops one in progress, and the index ends valid (on Citus two concurrent
builds on a distributed table fail inside Citus). The connections return dicts, as the
worker's do."""

from __future__ import annotations

import asyncio

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from llm_bot.db.migrate import migrate
from llm_bot.db.turn_index import ensure_index, index_name

pytestmark = pytest.mark.integration

INSTANCES = 4
DIMENSIONS = 8


async def test_instances_starting_together_build_the_index_once(fresh_database_url: str) -> None:
    await asyncio.to_thread(migrate, fresh_database_url)
    connections = [
        await AsyncConnection.connect(fresh_database_url, autocommit=True, row_factory=dict_row)
        for _ in range(INSTANCES)
    ]
    try:
        built = await asyncio.gather(
            *(ensure_index(connection, DIMENSIONS) for connection in connections)
        )
        cursor = await connections[0].execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
            (index_name("embedding", DIMENSIONS),),
        )
        assert await cursor.fetchall() == [{"indisvalid": True}]
    finally:
        for connection in connections:
            await connection.close()
    assert sorted(built) == [False] * (INSTANCES - 1) + [True]
