"""Apply one event's writes inside the caller's transaction: memories (puts and deletes),
notes, the history pair.

The worker calls :meth:`MemoryCommit.apply` in the transaction that also stores the
processed-event record, so the three either all happen or none do. Every embedding the writes
need (the pair's and each memory's) is made before the transaction, by
:meth:`MemoryCommit.prepare`: embedding inside it would hold every event of the group commit on
the embeddings endpoint. If embedding fails, the writes happen without
vectors: the pair shows in windows and a memory is found by its words, not by similarity.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.batches import ThreadRows, UserRows
from llm_bot.db.embedding_space import EmbeddingModelMismatch, EmbeddingSpace, space_for_write
from llm_bot.memory.memories import Held, lock_keys
from llm_bot.memory.notes_store import apply_notes_edits
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.store import MemoryStore, delete_memory, put_memory
from llm_bot.memory.turns.window import PairRows, write_pair
from llm_bot.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pair:
    """A pair (the user's turn and the reply) as a processed event leaves it for memory, with
    the memory writes of its run."""

    source_event: str
    thread_id: str
    user_id: str
    prompt: str
    reply: str
    at: datetime
    writes: RunWrites | None


@dataclass(frozen=True)
class PreparedPair:
    """A pair's writes with every embedding they need, made before the transaction."""

    rows: PairRows
    memory_vectors: dict[str, list[float]]


class MemoryCommit:
    """``max_chars`` bounds each history message as stored (``HISTORY_MAX_CHARS``): a prompt
    may be as long as a Pub/Sub message, and every later context and recall would carry it.
    ``notes_max_chars`` (``NOTES_MAX_CHARS``) bounds the notes as the commit rewrites them;
    a shared channel keeps its newest ``window_pairs`` (``CONTEXT_PAIRS``) for its window."""

    def __init__(
        self,
        store: MemoryStore,
        agent: str,
        idle: timedelta,
        *,
        max_chars: int,
        notes_max_chars: int,
        window_pairs: int,
    ) -> None:
        self._store = store
        self._agent = agent
        self._idle = idle
        self._max_chars = max_chars
        self._notes_max_chars = notes_max_chars
        self._window_pairs = window_pairs
        self._warned_of_switch = False

    @classmethod
    def from_settings(cls, store: MemoryStore, settings: Settings) -> MemoryCommit:
        return cls(
            store,
            settings.agent_name,
            timedelta(seconds=settings.session_idle_seconds),
            max_chars=settings.history_max_chars,
            notes_max_chars=settings.notes_max_chars,
            window_pairs=settings.context_pairs,
        )

    async def prepare(self, pair: Pair) -> PreparedPair:
        """The history pair and the memories to write, with their embeddings, computed outside
        any transaction, in one request."""
        puts = pair.writes.memory_puts if pair.writes is not None else []
        prompt, reply = pair.prompt[: self._max_chars], pair.reply[: self._max_chars]
        texts = [prompt, reply, *(put.content for put in puts)]
        vectors: list[list[float]] | list[None] = [None] * len(texts)
        try:
            vectors = await self._store.embedder.embed(texts)
        except Exception as error:  # recall and memory search degrade; the writes still happen
            logger.warning(
                "could not embed the pair; stored without vectors",
                extra={"userId": pair.user_id, "cause": f"{type(error).__name__}: {error}"},
            )
        rows = PairRows(
            pair.thread_id,
            pair.user_id,
            prompt,
            reply,
            pair.at,
            pair.source_event,
            vectors[0],
            vectors[1],
            pair.writes.visibility if pair.writes is not None else "public",
            pair.writes is not None and pair.writes.index_turns,
        )
        memory_vectors = {
            text: vector for text, vector in zip(texts[2:], vectors[2:], strict=True) if vector
        }
        return PreparedPair(rows, memory_vectors)

    @staticmethod
    def lock_keys(pair: Pair) -> tuple[ThreadRows, UserRows]:
        """What :meth:`apply` reads before it writes, named for the group committer
        (:mod:`llm_bot.db.group_commit`): works sharing one of these keys run one after another.
        A history pair's append reads the thread's last turn, so two appends to one thread must
        not interleave; the user's memories and notes are read (a version to keep, a private
        key, the notes document) before they are rewritten."""
        return ThreadRows("history", pair.thread_id), UserRows("memories", pair.user_id)

    async def apply(
        self,
        connection: AsyncConnection[Any],
        pair: Pair,
        prepared: PreparedPair,
        space: EmbeddingSpace | None,
    ) -> None:
        """``space`` is the embedding space as read under its write guard earlier in this
        transaction (:mod:`llm_bot.db.embedding_space`): vectors of another model are left out."""
        if space is None:
            raise EmbeddingModelMismatch("no embedding model is recorded: run `llm-bot migrate`")
        if not space.made_by(self._store.embedder.model, self._store.dimensions):
            prepared = self._without_vectors(prepared, space)
        writes = pair.writes
        if writes is not None and (writes.memory_puts or writes.memory_deletes):
            await self._apply_memories(connection, writes, prepared, pair.at)
        if writes is not None and writes.notes_edits:
            await apply_notes_edits(connection, writes, self._agent, self._notes_max_chars)
        await write_pair(connection, prepared.rows, self._idle, self._window_pairs)

    async def _apply_memories(
        self,
        connection: AsyncConnection[Any],
        writes: RunWrites,
        prepared: PreparedPair,
        at: datetime,
    ) -> None:
        """Puts and deletes, only ever of the run's user. A put over an existing key keeps the
        text it replaces as a version (:mod:`llm_bot.memory.versions`); a delete removes the
        memory and its versions. The keys are locked first: a commit of another worker touching
        one of them goes before or after this one, never between its reads and its writes (two
        versions of one number, or a forgotten text kept as the version of a memory put again).
        A key already gone (a redelivery, a concurrent delete) deletes nothing. A new memory
        whose text another event of the user stored in the same scope while this one ran
        (the same message sent twice) is written to that memory, not beside it.
        From a shared channel, a key that is private now (the tool saw it public, or not at
        all) is left alone: a DM's memory is never changed from a shared channel."""
        user = writes.user_id
        keys = [*writes.memory_deletes, *(put.key for put in writes.memory_puts)]
        created = [put.content for put in writes.memory_puts if put.new]
        held = await lock_keys(connection, user, keys, created)
        private = self._private_keys(writes, [memory for memory in held if memory.key in keys])
        twins = {
            memory.content: memory.key
            for memory in held
            if memory.visibility == writes.visibility and memory.key not in writes.memory_deletes
        }
        for key in writes.memory_deletes:
            if key not in private:
                await delete_memory(connection, user, key)
        for put in writes.memory_puts:
            if put.key not in private:
                vector = prepared.memory_vectors.get(put.content)
                await put_memory(
                    connection,
                    user,
                    twins.get(put.content, put.key) if put.new else put.key,
                    put.content,
                    put.metadata,
                    writes.visibility,
                    vector,
                    at,
                )

    @staticmethod
    def _private_keys(writes: RunWrites, touched: list[Held]) -> set[str]:
        """The keys a run from a shared channel touches that hold a memory learned in a DM."""
        if writes.visibility == "dm":
            return set()
        private = {memory.key for memory in touched if memory.visibility != "public"}
        if private:
            logger.warning(
                "memory writes from a shared channel to private memories refused",
                extra={"userId": writes.user_id, "keys": sorted(private)},
            )
        return private

    def _without_vectors(self, prepared: PreparedPair, space: EmbeddingSpace) -> PreparedPair:
        """The writes of a worker whose model is no longer the stored one (``llm-bot reembed``
        switched while it ran): kept, without vectors of the wrong model; the next
        ``llm-bot reembed`` gives them vectors."""
        if not self._warned_of_switch:
            self._warned_of_switch = True
            logger.error(
                "stored vectors are now %s's (%d dimensions): writing without vectors; restart"
                " the worker with MEMORY_EMBEDDING_MODEL / MEMORY_EMBEDDING_DIMENSIONS set to it",
                space.model,
                space.dimensions,
            )
        rows = replace(prepared.rows, user_vector=None, assistant_vector=None)
        return PreparedPair(rows, memory_vectors={})

    async def commit_now(self, pair: Pair) -> None:
        """Prepare and apply in a transaction of its own (``send --local``, tests)."""
        prepared = await self.prepare(pair)
        async with self._store.connection() as connection, connection.transaction():
            await self.apply(connection, pair, prepared, await space_for_write(connection))
