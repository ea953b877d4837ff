"""The memory pool's statement timeout: set on every connection the pool makes, whoever runs
statements on it, and none when it is 0."""

from __future__ import annotations

import pytest

from llm_bot.db.migrate import migrate
from llm_bot.local.openai_server import LocalModelServer
from llm_bot.memory.store import MemoryStore, StoreOptions

from ..conftest import server_embedder

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("timeout_ms", "shown"), [(1234, "1234ms"), (0, "0")])
async def test_every_pool_connection_carries_the_statement_timeout(
    fresh_database_url: str, embedding_server: LocalModelServer, timeout_ms: int, shown: str
) -> None:
    migrate(fresh_database_url)
    embedder = server_embedder(embedding_server)
    options = StoreOptions(pool_max_size=3)
    async with (
        MemoryStore.open(
            fresh_database_url, embedder, options, statement_timeout_ms=timeout_ms
        ) as store,
        store.connection() as first,
        store.connection() as second,
    ):
        for connection in (first, second):
            row = await (await connection.execute("SHOW statement_timeout")).fetchone()
            assert row == {"statement_timeout": shown}
    await embedder.close()
