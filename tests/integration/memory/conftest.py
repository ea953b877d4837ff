"""What the tests of this folder share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from llm_bot.db.vectors import register_vectors
from llm_bot_tools.local.openai_server import LocalModelServer

Connection = psycopg.AsyncConnection[Any]


@pytest.fixture
async def connection(migrated_database_url: str) -> AsyncIterator[Connection]:
    """An autocommit connection, rows as dicts and vectors sent as the pools send them, to a
    fresh database with the schema."""
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True, row_factory=dict_row
    ) as connection:
        register_vectors(connection)
        yield connection


@pytest.fixture
def fresh_servers(chat_server: LocalModelServer, embedding_server: LocalModelServer) -> None:
    """The module's model servers with no script, failure or recorded request of another test."""
    chat_server.reset()
    embedding_server.reset()
