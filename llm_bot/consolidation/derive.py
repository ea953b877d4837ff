"""One job's work against the database and the model: the window's turns, what each speaker's
memory already holds, the model's derivation, and its writes.

The writes run in the caller's transaction, the one that records the job in the processed-events
ledger, so they commit once or not at all. Before writing for a speaker the job locks that
speaker's turns of the window (:func:`llm_bot.memory.turns.consolidation.lock_sources`): a fact
whose sources were erased meanwhile is not written, nor the summary once any turn of the window
is gone (:mod:`llm_bot.lifecycle.erasure` says why the order holds). Facts go through the memories'
versioning (:func:`llm_bot.memory.store.put_memory`): one that replaces a memory keeps the
text it supersedes as a version, valid until the fact's own time, which is its sources' time,
not the job's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from llm_bot.consolidation.extraction import (
    KNOWN_MEMORIES,
    Derivation,
    Fact,
    WindowTurn,
    messages,
    parse,
)
from llm_bot.consolidation.jobs import Job
from llm_bot.db.embedding_space import EmbeddingSpace
from llm_bot.llm.client import ModelClient
from llm_bot.llm.messages import TokenUsage
from llm_bot.memory.derived import derived_metadata
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.store import MemoryStore, put_memory
from llm_bot.memory.turns.consolidation import Summary, insert_summary, lock_sources, window_turns
from llm_bot.memory.validation import new_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Applied:
    """What a job wrote: memories, summaries, and the facts left out because their sources
    were gone by then."""

    facts: int
    summaries: int
    sources_gone: int


class Consolidator:
    def __init__(self, store: MemoryStore, model: ModelClient) -> None:
        self._store = store
        self._model = model

    async def window(self, job: Job) -> list[WindowTurn]:
        """The window's turns, oldest first (none when the thread or its users were erased)."""
        async with self._store.connection() as connection:
            rows = await window_turns(connection, job.thread_id, job.from_seq, job.to_seq)
        return [WindowTurn(**row) for row in rows if row["role"] != "summary"]

    async def known(self, job: Job, speakers: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Each speaker's most recent memories the job may supersede: from a shared channel,
        only the public ones (a DM's memory is never changed from a shared channel). None when
        the window has more than one speaker: its summary is stored for each, and whatever
        the model is shown can reach it (a neighbour's turn asks for it), so one speaker's
        memories, told elsewhere, would be recalled to the others."""
        known: dict[str, list[tuple[str, str]]] = {}
        if len(speakers) > 1:
            return known
        for user_id in speakers:
            held = await self._store.for_user(user_id).list_memories(limit=KNOWN_MEMORIES)
            scope: Visibility = "dm" if job.is_dm else "public"
            known[user_id] = [(m.key, m.content) for m in held if m.visible_in(scope)]
        return known

    async def derive(
        self,
        window: Sequence[WindowTurn],
        known: Mapping[str, Sequence[tuple[str, str]]],
        model: str | None,
    ) -> tuple[Derivation, TokenUsage]:
        """One model call and the checks on its reply; raises the model's errors and
        :class:`llm_bot.consolidation.extraction.InvalidOutput`."""
        reply = await self._model.complete(messages(window, known), (), model=model)
        return parse(reply.text, window, known), reply.usage

    async def vectors(self, texts: Sequence[str]) -> list[list[float] | None]:
        """The texts' embeddings, or none: a fact without one is found by its words until
        ``llm-bot reembed`` gives it one."""
        if not texts:
            return []
        try:
            return list(await self._store.embedder.embed(list(texts)))
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as error:
            logger.warning("consolidation: embedding failed, writing without vectors: %s", error)
            return [None] * len(texts)

    async def keys(self, facts: Sequence[Fact], vectors: Sequence[list[float] | None]) -> list[str]:
        """Where each fact goes: the memory it replaces, a near-duplicate learned in the same
        scope, or a new key (:meth:`llm_bot.memory.store.UserMemories.resolve_key`). A fact
        without a vector (the embeddings failed, :meth:`vectors`) has no near-duplicate to be
        found by: it gets a new key rather than failing the job on the endpoint again."""
        keys = []
        for fact, vector in zip(facts, vectors, strict=True):
            if vector is None and fact.replaces is None:
                keys.append(new_key())
                continue
            memories = self._store.for_user(fact.user_id)
            key, _ = await memories.resolve_key(fact.content, fact.replaces, fact.visibility)
            keys.append(key)
        return keys

    async def apply(
        self,
        connection: AsyncConnection[Any],
        job: Job,
        window: Sequence[WindowTurn],
        derived: Derivation,
        planned: Planned,
        space: EmbeddingSpace | None,
    ) -> Applied:
        """The job's writes in the caller's transaction (the module's docstring)."""
        live_space = space is not None and space.made_by(
            self._store.embedder.model, self._store.dimensions
        )
        speakers = sorted({turn.user_id for turn in window if turn.role == "user"})
        alive: dict[str, set[int]] = {}
        for user_id in speakers:
            alive[user_id] = await lock_sources(
                connection, user_id, job.thread_id, job.from_seq, job.to_seq
            )
        written = gone = 0
        for fact, key, vector in zip(
            derived.facts, planned.keys, planned.fact_vectors, strict=True
        ):
            if not set(fact.sources) <= alive[fact.user_id]:
                gone += 1
                continue
            metadata = derived_metadata(job.thread_id, job.window, fact.sources, fact.observed_at)
            await put_memory(
                connection,
                fact.user_id,
                key,
                fact.content,
                metadata,
                fact.visibility,
                vector if live_space else None,
                fact.observed_at,
            )
            written += 1
        summaries = 0
        # The summary holds every speaker's words: written only while all the window's turns
        # are there (one erased meanwhile would leave their words in the others' rows).
        whole = set().union(*alive.values()) >= {turn.seq for turn in window}
        if derived.summary is not None and whole:
            last_at = max(turn.created_at for turn in window)
            private = any(turn.visibility == "dm" for turn in window)
            for user_id in speakers:
                if alive[user_id]:
                    summary = Summary(
                        job.thread_id,
                        job.from_seq,
                        job.to_seq,
                        user_id,
                        derived.summary,
                        last_at,
                        job.key.source,
                        planned.summary_vector if live_space else None,
                        "dm" if private else "public",
                    )
                    await insert_summary(connection, summary)
                    summaries += 1
        return Applied(written, summaries, gone)


@dataclass(frozen=True)
class Planned:
    """What the writes need from outside the transaction: each fact's key and vector, and the
    summary's vector."""

    keys: list[str]
    fact_vectors: list[list[float] | None]
    summary_vector: list[float] | None
