"""The memory pool's statement timeout: set on every connection the pool makes, whoever runs
statements on it, and none when it is 0."""

from __future__ import annotations

from typing import Literal

import pytest

from llm_bot.memory.store import MemoryStore
from llm_bot_tools.local.openai_server import LocalModelServer

from ...from_settings import settings_for
from ..conftest import server_embedder

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("timeout_ms", "role", "shown"),
    [(1234, "memory", "1234ms"), (0, "memory", "0"), (1234, "setup", "0")],
)
async def test_every_pool_connection_carries_the_statement_timeout(
    migrated_database_url: str,
    embedding_server: LocalModelServer,
    timeout_ms: int,
    role: Literal["memory", "setup"],
    shown: str,
) -> None:
    embedder = server_embedder(embedding_server)
    settings = settings_for(
        migrated_database_url, MEMORY_DB_POOL_MAX=3, MEMORY_STATEMENT_TIMEOUT_MS=timeout_ms
    )
    async with (
        MemoryStore.open(settings, embedder, role=role) as store,
        store.connection() as first,
        store.connection() as second,
    ):
        for connection in (first, second):
            row = await (await connection.execute("SHOW statement_timeout")).fetchone()
            assert row == {"statement_timeout": shown}
    await embedder.close()
