"""Open the memory services a process needs, from settings, and close them afterwards.

Without ``DATABASE_URL`` the graph runs with no memory and no memory tools: useful for
``llm-bot send --local`` and a model smoke test, never the production configuration.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from llm_bot.graph.tools import Tool
from llm_bot.llm.embeddings import CachingEmbedder, embedder_from_settings
from llm_bot.memory.long_term import LongTermMemory
from llm_bot.memory.retrieval import MemoryRetriever, NoMemory
from llm_bot.memory.store import MemoryStore, StoreOptions
from llm_bot.memory.tools import UpsertMemoryTool
from llm_bot.settings import Settings


@dataclass(frozen=True)
class MemoryServices:
    retriever: MemoryRetriever = field(default_factory=NoMemory)
    tools: Sequence[Tool] = ()
    store: MemoryStore | None = None


def store_options(settings: Settings) -> StoreOptions:
    return StoreOptions(
        index_kind=settings.vector_index,
        ivfflat_lists=settings.ivfflat_lists,
        ivfflat_probes=settings.ivfflat_probes,
        dedup_threshold=settings.dedup_threshold,
        connect_timeout_s=settings.retrieval_timeout_ms / 1000,
    )


@asynccontextmanager
async def open_memory_store(settings: Settings) -> AsyncIterator[MemoryStore]:
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set")
    embedder = embedder_from_settings(settings)
    try:
        async with MemoryStore.open(
            settings.database_url.get_secret_value(),
            CachingEmbedder(embedder),
            store_options(settings),
        ) as store:
            yield store
    finally:
        await embedder.close()


@asynccontextmanager
async def memory_services(settings: Settings) -> AsyncIterator[MemoryServices]:
    if settings.database_url is None:
        yield MemoryServices()
        return
    async with open_memory_store(settings) as store:
        retriever = LongTermMemory(store, settings.memory_threshold(), settings.injection_budget)
        tools = (UpsertMemoryTool(store, settings.memory_max_tokens),)
        yield MemoryServices(retriever, tools, store)
