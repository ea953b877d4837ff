"""Per-user semantic memories on LangGraph's ``AsyncPostgresStore`` (pgvector).

A memory is JSON ``{content, metadata}`` under a key (a UUID when new) in the namespace
``("memories", user_id)``, kept until deleted. :class:`MemoryStore` owns the store and its
connection pool; :meth:`MemoryStore.for_user` hands out a :class:`UserMemories` bound to one
namespace, the only way to read or write memories.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, cast

from langgraph.store.base import Item
from langgraph.store.postgres import AsyncPostgresStore
from langgraph.store.postgres.base import PostgresIndexConfig
from psycopg import AsyncConnection
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.pools import open_pool
from llm_bot.db.store_schema import ensure_schema
from llm_bot.llm.embeddings import Embedder
from llm_bot.memory.namespaces import MEMORIES, namespace_text, user_namespace
from llm_bot.memory.run_writes import LearnedIn
from llm_bot.memory.search import MemoryHit, SearchMode, hybrid_search
from llm_bot.memory.versions import Version, forget_versions, retire_current, versions_of
from llm_bot.settings import Settings

logger = logging.getLogger(__name__)

# What a put does to its key: a new memory, a new text for one, or a near-duplicate merged.
PutEffect = Literal["created", "updated", "merged"]


@dataclass(frozen=True)
class StoreOptions:
    index_kind: Literal["hnsw", "ivfflat"]
    ivfflat_lists: int
    ivfflat_probes: int
    dedup_threshold: float

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreOptions:
        return cls(
            index_kind=settings.vector_index,
            ivfflat_lists=settings.ivfflat_lists,
            ivfflat_probes=settings.ivfflat_probes,
            dedup_threshold=settings.dedup_threshold,
        )


@dataclass(frozen=True)
class Memory:
    key: str
    content: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    learned_in: LearnedIn = "dm"

    def visible_in(self, scope: LearnedIn) -> bool:
        """Whether a run in ``scope`` may see or touch it: in a DM all, in public the public."""
        return scope == "dm" or self.learned_in == "public"


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
        ann: dict[str, Any] = {"kind": options.index_kind}
        if options.index_kind == "ivfflat":
            ann["nlist"] = options.ivfflat_lists
        self.index_config = cast(
            PostgresIndexConfig,
            {
                "dims": dimensions,
                "embed": embedder.embed,
                "fields": ["content"],
                "distance_type": "cosine",
                "ann_index_config": ann,
            },
        )
        self.store = AsyncPostgresStore(pool, index=self.index_config)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        embedder: Embedder,
        *,
        role: Literal["memory", "setup"] = "memory",
    ) -> AsyncIterator[MemoryStore]:
        """Connect (the ``memory`` pool, or ``setup``'s for long work: :mod:`llm_bot.db.pools`),
        create or check the schema, and close everything on the way out."""
        async with open_pool(settings, role) as pool:
            options = StoreOptions.from_settings(settings)
            memory = cls(pool, embedder, await embedder.dimensions(), options)
            await ensure_schema(memory.store, pool, memory.dimensions, embedder.model)
            yield memory

    def store_on(
        self, connection: AsyncConnection[Any], vectors: Mapping[str, list[float]]
    ) -> AsyncPostgresStore:
        """The same store, writing through ``connection`` (inside the caller's transaction),
        with the embeddings made beforehand: it never calls the embeddings endpoint."""
        index = cast(PostgresIndexConfig, {**self.index_config, "embed": _embedded(vectors)})
        return AsyncPostgresStore(connection, index=index)

    def for_user(self, user_id: str) -> UserMemories:
        return UserMemories(self, user_id)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        async with self._pool.connection() as connection:
            if self.options.index_kind == "ivfflat":
                await connection.execute(f"SET ivfflat.probes = {int(self.options.ivfflat_probes)}")
            yield connection

    async def users(self) -> list[str]:
        """Encoded namespace labels of every user with memories (for admin and re-embedding)."""
        namespaces = await self.store.alist_namespaces(prefix=(MEMORIES,), limit=1_000_000)
        return [namespace[1] for namespace in namespaces if len(namespace) == 2]


class UserMemories:
    """One user's memories; every method is scoped to that user's namespace."""

    def __init__(self, memory: MemoryStore, user_id: str) -> None:
        self._memory = memory
        self.user_id = user_id
        self.namespace = user_namespace(user_id)
        self.prefix = namespace_text(self.namespace)

    async def put(
        self, content: str, metadata: dict[str, str] | None = None, key: str | None = None
    ) -> tuple[str, PutEffect]:
        """Store a memory now (admin path; the worker defers its writes to the commit)."""
        key, effect = await self.resolve_key(content, key)
        [vector] = await self._memory.embedder.embed([content])
        async with self._memory.connection() as connection, connection.transaction():
            await retire_current(connection, self.prefix, key, content)
            await self._memory.store_on(connection, {content: vector}).aput(
                self.namespace, key, memory_value(content, metadata), index=["content"]
            )
        return key, effect

    async def resolve_key(
        self, content: str, key: str | None, scope: LearnedIn | None = None
    ) -> tuple[str, PutEffect]:
        """Where a write of ``content`` goes: ``key`` if given, else the key of a near-duplicate
        (similarity >= ``MEMORY_DEDUP_THRESHOLD``), else a new UUID. With a ``scope`` (the
        worker's writes), only a twin learned in that same scope is merged into: a fact told
        in public never overwrites, nor reveals, one told in a DM, nor the other way."""
        if key is not None:
            return key, ("updated" if await self.get(key) is not None else "created")
        twin = await self._nearest(content, include_private=scope != "public")
        if twin is not None and twin.similarity >= self._memory.options.dedup_threshold:
            found = await self.get(twin.key) if scope is not None else None
            if scope is None or (found is not None and found.learned_in == scope):
                return twin.key, "merged"
        return str(uuid.uuid4()), "created"

    async def count(self) -> int:
        async with (
            self._memory.connection() as connection,
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            await cursor.execute("SELECT count(*) FROM store WHERE prefix = %s", (self.prefix,))
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def get(self, key: str) -> Memory | None:
        item = await self._memory.store.aget(self.namespace, key)
        return None if item is None else _memory_of(item)

    async def delete(self, key: str) -> bool:
        """Forget the memory: its earlier versions go with it."""
        existed = await self.get(key) is not None
        async with self._memory.connection() as connection, connection.transaction():
            await forget_versions(connection, self.prefix, key)
            await self._memory.store_on(connection, {}).adelete(self.namespace, key)
        return existed

    async def history(self, key: str) -> list[Version]:
        """The memory's earlier texts, oldest first, each with the period it was current."""
        async with self._memory.connection() as connection:
            return await versions_of(connection, self.prefix, key)

    async def list_memories(self, limit: int = 100, offset: int = 0) -> list[Memory]:
        items = await self._memory.store.asearch(self.namespace, limit=limit, offset=offset)
        return [_memory_of(item) for item in items]

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
                self.prefix,
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


def memory_value(
    content: str, metadata: dict[str, str] | None, learned_in: str = "public"
) -> dict[str, object]:
    """The stored value; ``learnedIn`` says where the memory was (last) told: a memory without
    one counts as learned in a DM (migration 0012 gave every older memory one)."""
    return {"content": content, "metadata": metadata or {}, "learnedIn": learned_in}


def _memory_of(item: Item) -> Memory:
    return Memory(
        key=item.key,
        content=item.value.get("content", ""),
        metadata=item.value.get("metadata") or {},
        created_at=item.created_at.isoformat(),
        updated_at=item.updated_at.isoformat(),
        learned_in="public" if item.value.get("learnedIn") == "public" else "dm",
    )


def _embedded(
    vectors: Mapping[str, list[float]],
) -> Callable[[Sequence[str]], Awaitable[list[list[float]]]]:
    """An embed function that only looks vectors up (see :meth:`MemoryStore.store_on`)."""

    async def embed(texts: Sequence[str]) -> list[list[float]]:
        missing = [text for text in texts if text not in vectors]
        if missing:
            raise LookupError(f"{len(missing)} text(s) were not embedded before the transaction")
        return [vectors[text] for text in texts]

    return embed
