"""Integration fixtures: a memory store on a fresh database, local model servers, and a worker's
world per test: unique topics and subscriptions on the session emulator, a fresh database and a
local model server (see :class:`llm_bot_tools.devstack.worker_harness.Bus`). Workers reach the
emulator through a front that releases the stream of a worker that stopped or died (see
:mod:`llm_bot_tools.local.pubsub_front`), as real Pub/Sub does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.pools import open_pool
from llm_bot.llm.client import ModelClient
from llm_bot.llm.embeddings import CachingEmbedder, OpenAIEmbedder
from llm_bot.memory.store import MemoryStore
from llm_bot_tools.devstack.worker_harness import Bus, model_environment
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator
from llm_bot_tools.local.pubsub_front import PubSubFront

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
    migrated_database_url: str, embedding_server: LocalModelServer
) -> AsyncIterator[MemoryStore]:
    embedder = server_embedder(embedding_server)
    async with MemoryStore.open(
        settings_for(migrated_database_url), CachingEmbedder(embedder)
    ) as store:
        yield store
    await embedder.close()


@pytest.fixture
async def migrated_pool(migrated_database_url: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """A small autocommit pool on this test's database, migrated."""
    async with AsyncConnectionPool(
        migrated_database_url, min_size=1, max_size=4, kwargs={"autocommit": True}
    ) as pool:
        yield pool


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


BusFactory = Callable[..., Bus]


@pytest.fixture
def make_bus(
    pubsub_emulator: PubSubEmulator,
    pubsub_front: PubSubFront,
    unique_name: str,
    model_server: LocalModelServer,
) -> Iterator[BusFactory]:
    """Builds this test's bus on ``database_url`` with extra worker ``settings``."""
    buses: list[Bus] = []

    def make(database_url: str, settings: dict[str, str], **bus_options: Any) -> Bus:
        environment = {
            "DATABASE_URL": database_url,
            "PUBSUB_EMULATOR_HOST": pubsub_front.host,
            **settings,
            **model_environment(model_server),
        }
        bus = Bus(pubsub_emulator, unique_name, environment, ack_deadline_seconds=10, **bus_options)
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        bus.close()


@pytest.fixture
def bus(make_bus: BusFactory, migrated_database_url: str) -> Bus:
    # The emulator drops (never dead-letters) a message past max delivery attempts; the
    # worker's own limit (LLM_BOT_MAX_DELIVERY_ATTEMPTS) is what these tests exercise.
    return make_bus(
        migrated_database_url, {"LLM_BOT_SHUTDOWN_GRACE_S": "5"}, max_delivery_attempts=100
    )
