"""Per-user semantic memories in the ``memories`` table (pgvector and full text).

A memory is a text with flat metadata under a key (13 random base32 characters when new:
:func:`~llm_bot.memory.validation.new_key`) of one user, kept until deleted, with its embedding
and where it was learned (``visibility``). :class:`MemoryStore` owns the connection pool;
:meth:`MemoryStore.for_user` hands out a :class:`UserMemories` bound to one user id, the only
way to read or write memories, so every statement is scoped to one user by construction. The
schema is our migrations' (``llm-bot migrate``); the statements are
:mod:`llm_bot.memory.memories`'.

Writes carry their time as a parameter (never the database's clock inside an upsert) and every
unique key starts with the user id, so each statement reads and writes one user's rows.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.clock import utc_now
from llm_bot.db.embedding_space import (
    EmbeddingModelMismatch,
    EmbeddingSpace,
    read_space,
    record_space,
)
from llm_bot.db.hybrid import SearchMode
from llm_bot.db.pools import open_pool
from llm_bot.db.turn_index import ensure_index
from llm_bot.llm.embeddings import Embedder
from llm_bot.memory import memories
from llm_bot.memory.memories import Memory
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.search import MemoryHit, hybrid_search
from llm_bot.memory.validation import new_key
from llm_bot.memory.versions import Version, forget_versions, retire_current, versions_of
from llm_bot.settings import Settings

logger = logging.getLogger(__name__)

# What a put does to its key: a new memory, a new text for one, or a near-duplicate merged.
PutEffect = Literal["created", "updated", "merged"]


@dataclass(frozen=True)
class StoreOptions:
    dedup_threshold: float

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreOptions:
        return cls(dedup_threshold=settings.dedup_threshold)


class MemoryStore:
    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        embedder: Embedder,
        dimensions: int,
        options: StoreOptions,
    ) -> None:
        self._pool = pool
        self.embedder = embedder
        self.dimensions = dimensions
        self.options = options

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        embedder: Embedder,
        *,
        role: Literal["memory", "setup", "console"] = "memory",
    ) -> AsyncIterator[MemoryStore]:
        """Connect (the ``memory`` pool, ``setup``'s for long work, or the operator console's
        read-only one: :mod:`llm_bot.db.pools`),
        check that the stored vectors are the embedding model's (recording it on a first
        start), and close everything on the way out."""
        async with open_pool(settings, role) as pool:
            options = StoreOptions.from_settings(settings)
            memory = cls(pool, embedder, await embedder.dimensions(), options)
            async with pool.connection() as connection:
                await settle_space(connection, embedder.model, memory.dimensions)
            yield memory

    def for_user(self, user_id: str) -> UserMemories:
        return UserMemories(self, user_id)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        async with self._pool.connection() as connection:
            yield connection


class UserMemories:
    """One user's memories; every method is scoped to that user."""

    def __init__(self, memory: MemoryStore, user_id: str) -> None:
        if not user_id:
            raise ValueError("user id must not be empty")
        self._memory = memory
        self.user_id = user_id

    async def put(
        self, content: str, metadata: dict[str, str] | None = None, key: str | None = None
    ) -> tuple[str, PutEffect]:
        """Store a memory now, as public (admin path; the worker defers its writes to the
        commit)."""
        key, effect = await self.resolve_key(content, key)
        [vector] = await self._memory.embedder.embed([content])
        async with self._memory.connection() as connection, connection.transaction():
            await put_memory(
                connection, self.user_id, key, content, metadata or {}, "public", vector, utc_now()
            )
        return key, effect

    async def resolve_key(
        self, content: str, key: str | None, scope: Visibility | None = None
    ) -> tuple[str, PutEffect]:
        """Where a write of ``content`` goes: ``key`` if given, else the key of a near-duplicate
        (similarity >= ``MEMORY_DEDUP_THRESHOLD``), else a new key. With a ``scope`` (the
        worker's writes), only a twin learned in that same scope is merged into: a fact told
        in public never overwrites, nor reveals, one told in a DM, nor the other way."""
        if key is not None:
            return key, ("updated" if await self.get(key) is not None else "created")
        twin = await self._nearest(content, include_private=scope != "public")
        if twin is not None and twin.similarity >= self._memory.options.dedup_threshold:
            found = await self.get(twin.key) if scope is not None else None
            if scope is None or (found is not None and found.visibility == scope):
                return twin.key, "merged"
        return new_key(), "created"

    async def count(self) -> int:
        async with self._memory.connection() as connection:
            return await memories.count_of_user(connection, self.user_id)

    async def get(self, key: str) -> Memory | None:
        async with self._memory.connection() as connection:
            return await memories.get(connection, self.user_id, key)

    async def delete(self, key: str) -> bool:
        """Forget the memory: its earlier versions go with it."""
        async with self._memory.connection() as connection, connection.transaction():
            return await delete_memory(connection, self.user_id, key)

    async def history(self, key: str) -> list[Version]:
        """The memory's earlier texts, oldest first, each with the period it was current."""
        async with self._memory.connection() as connection:
            return await versions_of(connection, self.user_id, key)

    async def list_memories(self, limit: int = 100, offset: int = 0) -> list[Memory]:
        """The most recently written first."""
        async with self._memory.connection() as connection:
            return await memories.list_of_user(connection, self.user_id, limit, offset)

    async def search(
        self,
        query: str,
        *,
        limit: int,
        threshold: float,
        mode: SearchMode = "hybrid",
        vector: list[float] | None = None,
        include_private: bool = True,
    ) -> list[MemoryHit]:
        """``vector`` is the query's embedding when the caller already has it;
        ``include_private`` false leaves out what was learned in DMs."""
        if vector is None:
            vector = (await self._memory.embedder.embed([query]))[0]
        async with self._memory.connection() as connection:
            return await hybrid_search(
                connection,
                self.user_id,
                query,
                vector,
                limit=limit,
                threshold=threshold,
                mode=mode,
                include_private=include_private,
            )

    async def _nearest(self, content: str, include_private: bool) -> MemoryHit | None:
        hits = await self.search(
            content, limit=1, threshold=-1.0, mode="dense", include_private=include_private
        )
        return hits[0] if hits else None


async def put_memory(
    connection: AsyncConnection[Any],
    user_id: str,
    key: str,
    content: str,
    metadata: dict[str, str],
    visibility: Visibility,
    vector: list[float] | None,
    at: datetime,
) -> None:
    """Write a memory in the caller's transaction, keeping the text it replaces as a version
    (:mod:`llm_bot.memory.versions`). Without ``vector`` (embedding failed) it is found by its
    words until ``llm-bot reembed`` gives it one."""
    await retire_current(connection, user_id, key, content, at)
    await memories.put(connection, user_id, key, content, metadata, visibility, vector, at)


async def delete_memory(connection: AsyncConnection[Any], user_id: str, key: str) -> bool:
    """Forget a memory and its versions in the caller's transaction; whether it existed."""
    await forget_versions(connection, user_id, key)
    return await memories.delete(connection, user_id, key)


async def settle_space(
    connection: AsyncConnection[Any], model: str, dimensions: int
) -> EmbeddingSpace:
    """The stored space, recorded as ``model`` on a first start (with the index of its size
    over history, :mod:`llm_bot.db.turn_index`); raises :class:`EmbeddingModelMismatch` when
    the vectors are another model's.

    A database from before the model was recorded holds vectors of an unnamed model: if their
    size is the configured model's, they are taken to be its (the size is all that was checked
    then); otherwise start-up is refused as for a named model."""
    space = await read_space(connection)
    if space is None:
        for stored in await memories.legacy_dimensions(connection):
            if stored != dimensions:
                raise EmbeddingModelMismatch(
                    f"stored vectors have {stored} dimensions but the embedding model {model!r}"
                    f" produces {dimensions}. {_REMEDY}"
                )
        await record_space(connection, model, dimensions)
        space = await read_space(connection)
        if space is None:
            raise RuntimeError("embedding_space holds no row after one was recorded")
        await ensure_index(connection, space.dimensions)
    if not space.made_by(model, dimensions):
        raise EmbeddingModelMismatch(
            f"stored vectors (memories and history) were made by {space.model!r}"
            f" ({space.dimensions} dimensions) but the embedding model is {model!r}"
            f" ({dimensions} dimensions). {_REMEDY}"
        )
    return space


_REMEDY = (
    "Either set MEMORY_EMBEDDING_MODEL / MEMORY_EMBEDDING_DIMENSIONS back to the stored model,"
    " or move every vector to the new model while the workers keep running: `llm-bot reembed`"
    " with the new model configured, then deploy the workers with it."
)
