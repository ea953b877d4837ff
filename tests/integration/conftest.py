"""Integration fixtures: a memory store on a fresh database, and local model servers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import openai
import pytest

from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.migrate import migrate
from llm_bot.db.pools import open_pool
from llm_bot.llm.client import ModelClient
from llm_bot.llm.embeddings import CachingEmbedder, OpenAIEmbedder
from llm_bot.memory.store import MemoryStore
from llm_bot_tools.local.openai_server import LocalModelServer

from ..from_settings import settings_for


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[LocalModelServer]:
    with LocalModelServer() as server:
        yield server


def server_embedder(server: LocalModelServer, dimensions: int | None = None) -> OpenAIEmbedder:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=5)
    return OpenAIEmbedder(client, "local-embeddings", dimensions)


@pytest.fixture
async def memory_store(
    fresh_database_url: str, embedding_server: LocalModelServer
) -> AsyncIterator[MemoryStore]:
    migrate(fresh_database_url)
    embedder = server_embedder(embedding_server)
    async with MemoryStore.open(
        settings_for(fresh_database_url), CachingEmbedder(embedder)
    ) as store:
        yield store
    await embedder.close()


@pytest.fixture
def model_server() -> Iterator[LocalModelServer]:
    """The model side of one worker or handler test, over HTTP: scripts, faults, requests."""
    with LocalModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def chat_server() -> Iterator[LocalModelServer]:
    """The model side of graph tests; embeddings keep their own server (``embedding_server``)."""
    with LocalModelServer() as server:
        yield server


@pytest.fixture
async def model(chat_server: LocalModelServer) -> AsyncIterator[ModelClient]:
    client = openai.AsyncOpenAI(
        base_url=chat_server.base_url, api_key="k", max_retries=0, timeout=5
    )
    yield ModelClient(client, "local-test-model", "chat", deadline_s=5)
    await client.close()


@asynccontextmanager
async def running_committer(
    url: str, max_batch: int, max_delay_s: float
) -> AsyncIterator[GroupCommitter]:
    """A group committer on a ledger pool of its own, as the worker's; on the way out it
    commits what is queued."""
    async with (
        open_pool(settings_for(url, LLM_BOT_DB_POOL_MAX=2), "ledger") as pool,
        GroupCommitter(pool, max_batch=max_batch, max_delay_s=max_delay_s) as committer,
    ):
        yield committer
