"""Open the memory services a process needs, from settings, and close them afterwards.

Without ``DATABASE_URL`` the graph runs with no memory and no memory tools: useful for
``llm-bot send --local`` and a model smoke test, never the production configuration.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from llm_bot.clock import utc_now
from llm_bot.db.personalities import Personalities, PersonalityLookup
from llm_bot.llm.embedding_batch import BatchingEmbedder
from llm_bot.llm.embeddings import CachingEmbedder, LocalEmbedder, embedder_from_settings
from llm_bot.memory.commit import MemoryCommit
from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
from llm_bot.memory.long_term import content_limit
from llm_bot.memory.notes_store import ManageNotesTool
from llm_bot.memory.retrieval import MemoryRetriever, NoMemory
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.tools import DeleteMemoryTool, MemoryTool, UpsertMemoryTool
from llm_bot.settings import Settings


@dataclass(frozen=True)
class MemoryServices:
    retriever: MemoryRetriever = field(default_factory=NoMemory)
    memory_tools: Sequence[MemoryTool] = ()
    commit: MemoryCommit | None = None  # None: nothing to write (no database)
    personalities: Personalities | None = None  # None: named personalities are left out


@asynccontextmanager
async def open_memory_store(
    settings: Settings, role: Literal["memory", "console"] = "memory"
) -> AsyncIterator[MemoryStore]:
    """On the ``memory`` pool (or the console's, its read-only twin): each statement ends at
    ``MEMORY_STATEMENT_TIMEOUT_MS``.
    The local model is loaded once the database answers: a database that cannot be reached
    fails the command without seconds of loading first."""
    if settings.database_url is None:
        raise ValueError("DATABASE_URL is not set")
    embedder = embedder_from_settings(settings)
    try:
        async with MemoryStore.open(
            settings,
            CachingEmbedder(BatchingEmbedder(embedder, settings.embedding_batch_wait_ms / 1000)),
            role=role,
        ) as store:
            if isinstance(embedder, LocalEmbedder):
                await embedder.warm()
            yield store
    finally:
        await embedder.close()


async def set_up_memory_store(settings: Settings) -> int:
    """Record the embedding model of the stored vectors, or check it (``llm-bot migrate``);
    returns their size. The embeddings endpoint is asked only when
    ``MEMORY_EMBEDDING_DIMENSIONS`` is unset."""
    async with open_memory_store(settings) as store:
        return store.dimensions


@asynccontextmanager
async def memory_services(
    settings: Settings, clock: Callable[[], datetime] = utc_now
) -> AsyncIterator[MemoryServices]:
    if settings.database_url is None:
        yield MemoryServices()
        return
    limits = ContextLimits.from_settings(settings)
    async with open_memory_store(settings) as store:
        retriever = PostgresMemoryRetriever(store, limits, settings.agent_name, clock)
        memory_tools: tuple[MemoryTool, ...] = (
            UpsertMemoryTool(
                store,
                content_limit(settings.memory_max_tokens, settings.injection_budget),
                settings.retention_memories_per_user,
            ),
            DeleteMemoryTool(store),
            ManageNotesTool(store, settings.agent_name, settings.notes_max_chars),
        )
        yield MemoryServices(
            retriever,
            memory_tools,
            MemoryCommit.from_settings(store, settings),
            PersonalityLookup(store.connection, settings.personality_cache_ttl_ms / 1000),
        )
