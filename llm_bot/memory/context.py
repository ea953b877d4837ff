"""The memory context of one question: its parts read from Postgres and put in order.

Order in the request: system prompt, (in a shared channel) who may ask what, notes, relevant
memories, recalled older messages (in time order, with dates), the thread's window, then this
run's messages. The notes and the window are read in one statement while the query is embedded;
memories and recall, which need its vector, then each in one of their own, side by side. A part
that fails is logged and left out, so a fault costs that part only. Priority when the whole
budget (``MAX_CONTEXT_TOKENS`` less the new prompt) is tight: notes (already size-capped), then
the window from its newest pair back, then memories by similarity (facts kept about the user say
more per token than a message), then recalled messages. What fits within each part's own budget
(:mod:`llm_bot.memory.budget`) and how the parts read (:mod:`llm_bot.memory.rendering`) are
pure and kept apart, so they are tried without a database; this module holds what waits on one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.budget import (
    MEMORY_CANDIDATES,
    cited_turns,
    memories_within,
    memory_share,
    newest_pairs_within,
    recall_candidates,
    select_recalled,
)
from llm_bot.memory.long_term import memory_cost, render_memories
from llm_bot.memory.notes_store import NO_NOTES, NotesAndWindow, read_notes_and_window
from llm_bot.memory.recall import NO_RECALL, Recall, RecalledTurn, recall
from llm_bot.memory.rendering import (
    notes_block,
    shared_channel_block,
    speaker_name,
    window_message,
)
from llm_bot.memory.retrieval import MemoryContext
from llm_bot.memory.search import MemoryHit
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.window import Turn, read_window
from llm_bot.memory.validation import approx_tokens
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics
from llm_bot.telemetry.traces import child_span

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class ContextLimits:
    max_context_tokens: int
    memory_budget_tokens: int
    context_pairs: int
    recall_budget_tokens: int
    threshold: float
    session_idle: timedelta
    private_in_public: bool  # MEMORY_PRIVATE_IN_PUBLIC: DM knowledge in shared channels

    @property
    def memory_and_recall_tokens(self) -> int:
        """The two sections' budgets together, which they share: the most the recall section
        can hold (a user without memories), so recall ranks candidates for that much."""
        return self.recall_budget_tokens + self.memory_budget_tokens

    @classmethod
    def from_settings(cls, settings: Settings) -> ContextLimits:
        return cls(
            max_context_tokens=settings.max_context_tokens,
            memory_budget_tokens=settings.injection_budget,
            context_pairs=settings.context_pairs,
            recall_budget_tokens=settings.recall_budget,
            threshold=settings.memory_threshold(),
            session_idle=timedelta(seconds=settings.session_idle_seconds),
            private_in_public=settings.private_in_public,
        )


@dataclass(frozen=True)
class Parts:
    notes: str
    memories: list[MemoryHit]
    window: list[Turn]
    recalled: list[RecalledTurn]
    deep: bool = False  # recall found the user deep: the event's pair enters the recall index
    # Candidates left out before assembly, by reason: another scope (notes and memories learned
    # in a DM, in a shared channel), below the similarity threshold.
    left_out: dict[str, int] = field(default_factory=dict)


class PostgresMemoryRetriever:
    """The :class:`~llm_bot.memory.retrieval.MemoryRetriever` of the memory layers in Postgres."""

    def __init__(
        self,
        store: MemoryStore,
        limits: ContextLimits,
        agent: str,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._limits = limits
        self._agent = agent
        self._clock = clock

    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext:
        """In a shared channel (``private`` false) only what was learned in shared channels is
        shown (notes, memories, recalled messages), unless ``private_in_public`` widens it, and
        every user turn names its speaker. The question's relative dates count from
        ``asked_at``, else from the clock."""
        with metrics.timed(metrics.memory_retrieval_duration):
            context = await self._retrieve(
                user_id,
                thread_id,
                query,
                include_private=private or self._limits.private_in_public,
                shared=not private,
                asked_at=asked_at,
            )
        metrics.memory_retrievals.add(1)
        return context

    async def _retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        include_private: bool,
        shared: bool,
        asked_at: datetime | None,
    ) -> MemoryContext:
        _, context, failed = await self._assembled(
            user_id, thread_id, query, include_private, shared, asked_at
        )
        if failed:
            context.stats["retrievalFailed"] = len(failed)
        return context

    async def consider(
        self, user_id: str, thread_id: str, query: str, *, private: bool
    ) -> tuple[Parts, MemoryContext, list[str]]:
        """What :meth:`retrieve` would find for ``query`` (the parts), the context it would
        give (what entered the prompt, what was left out by reason), and the parts that
        failed: the operator console's "try a recall" shows the worker's own decision, not a
        copy of it."""
        include_private = private or self._limits.private_in_public
        return await self._assembled(user_id, thread_id, query, include_private, not private)

    async def _assembled(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        include_private: bool,
        shared: bool,
        asked_at: datetime | None = None,
    ) -> tuple[Parts, MemoryContext, list[str]]:
        failed: list[str] = []
        asked = asked_at or self._clock()
        parts = await self._parts(user_id, thread_id, query, include_private, failed, asked)
        budget = self._limits.max_context_tokens - approx_tokens(query)
        context = assemble(parts, self._limits, budget, requester=user_id, shared=shared)
        return parts, context, failed

    async def _parts(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        include_private: bool,
        failed: list[str],
        asked_at: datetime,
    ) -> Parts:
        """Each part started as soon as it can be: the notes and the window alongside the
        embedding, then memories and recall (outside the window)."""
        vector, read = await asyncio.gather(
            _degrade("embedding", self._embed(query), None, user_id, failed),
            self._notes_and_window_or_window(user_id, thread_id, include_private, failed),
        )
        notes, window = read.notes, read.window
        shown = notes.content if include_private or notes.visibility == "public" else ""
        scope = read.private_memories + (1 if notes.content and not shown else 0)
        left_out = {"another_scope": scope}
        if vector is None:
            return Parts(shown, [], window, [], left_out=left_out)
        (memories, below), recalled = await asyncio.gather(
            _degrade(
                "memories",
                self._memories(user_id, query, vector, include_private),
                ([], 0),
                user_id,
                failed,
            ),
            _degrade(
                "recall",
                self._recall(user_id, query, vector, window, include_private, asked_at),
                NO_RECALL,
                user_id,
                failed,
            ),
        )
        left_out["below_threshold"] = below
        return Parts(shown, memories, window, recalled.turns, recalled.deep, left_out)

    async def _embed(self, query: str) -> list[float]:
        return (await self._store.embedder.embed([query]))[0]

    async def _notes_and_window_or_window(
        self, user_id: str, thread_id: str, include_private: bool, failed: list[str]
    ) -> NotesAndWindow:
        """The notes and the window in one statement; when it fails (a locked table, a
        statement timeout on either side), the window alone, so a fault in the notes does not
        cost the thread its window."""
        read = await _degrade(
            "notes and window",
            self._notes_and_window(user_id, thread_id, include_private),
            None,
            user_id,
            failed,
        )
        if read is not None:
            return read
        window = await _degrade("window", self._window(thread_id), [], user_id, failed)
        return NotesAndWindow(NO_NOTES, window)

    async def _window(self, thread_id: str) -> list[Turn]:
        limits = self._limits
        async with self._store.connection() as connection:
            return await read_window(
                connection, thread_id, limits.context_pairs, self._clock(), limits.session_idle
            )

    async def _notes_and_window(
        self, user_id: str, thread_id: str, include_private: bool
    ) -> NotesAndWindow:
        """The notes, the window and, where they may not be shown, the count of the user's
        memories learned in DMs (up to :data:`~llm_bot.memory.budget.MEMORY_CANDIDATES`)."""
        limits = self._limits
        now = self._clock()
        async with self._store.connection() as connection:
            return await read_notes_and_window(
                connection,
                user_id,
                self._agent,
                thread_id,
                pairs=limits.context_pairs,
                now=now,
                idle=limits.session_idle,
                withheld=not include_private,
                candidates=MEMORY_CANDIDATES,
            )

    async def _memories(
        self, user_id: str, query: str, vector: list[float], include_private: bool
    ) -> tuple[list[MemoryHit], int]:
        """All of the user's memories when they fit the memory budget (a threshold tuned to
        keep noise out of a long list would silence a fact the model needs in a short one);
        beyond it, those at or above the threshold or sharing a word with the query. With how
        many the threshold left out."""
        hits = await self._store.for_user(user_id).search(
            query,
            limit=MEMORY_CANDIDATES,
            threshold=-1.0,
            vector=vector,
            include_private=include_private,
        )
        fits = sum(memory_cost(hit) for hit in hits) <= self._limits.memory_budget_tokens
        if len(hits) < MEMORY_CANDIDATES and fits:
            return hits, 0
        threshold = self._limits.threshold
        kept = [hit for hit in hits if hit.similarity >= threshold or hit.keyword_match]
        return kept, len(hits) - len(kept)

    async def _recall(
        self,
        user_id: str,
        query: str,
        vector: list[float],
        window: list[Turn],
        include_private: bool,
        asked_at: datetime,
    ) -> Recall:
        async with self._store.connection() as connection:
            return await recall(
                connection,
                user_id,
                query,
                vector,
                exclude={(turn.thread_id, turn.seq) for turn in window},
                limit=None,  # the recall section takes them until its budget is spent
                ranked=recall_candidates(self._limits.memory_and_recall_tokens),
                threshold=self._limits.threshold,
                include_private=include_private,
                asked_at=asked_at,
            )


def assemble(
    parts: Parts, limits: ContextLimits, budget: int, *, requester: str, shared: bool
) -> MemoryContext:
    """The memory context for ``requester``, asking in a thread that is ``shared`` (not a DM)
    or not, within ``budget`` tokens."""
    notes = notes_block(parts.notes)
    used: dict[str, int] = {"notes": approx_tokens(notes), "memories": 0, "recall": 0}
    window = newest_pairs_within(parts.window, budget - used["notes"])
    used["window"] = sum(approx_tokens(turn.content) for turn in window)
    room = budget - used["notes"] - used["window"]
    shared_tokens = min(limits.memory_and_recall_tokens, room)
    memories, spent = memories_within(
        parts.memories,
        memory_share(limits.memory_budget_tokens, shared_tokens, recalled=bool(parts.recalled)),
    )
    selection = select_recalled(parts.recalled, shared_tokens - spent, cited_turns(memories))
    recalled = selection.turns
    blocks = [shared_channel_block(requester)] if shared else []
    blocks += [notes] if notes else []
    if memories:
        text, _ = render_memories(memories, limits.memory_budget_tokens, len(parts.memories))
        blocks.append(text)
        used["memories"] = approx_tokens(text)
    messages = [ChatMessage("system", block) for block in blocks]
    if recalled:
        text = selection.text
        name = speaker_name(requester) if shared else None
        messages.append(ChatMessage("user", text, name=name))
        used["recall"] = approx_tokens(text)
    messages += [window_message(turn, shared) for turn in window]
    logger.debug("context assembled", extra={"contextTokens": used})  # also a metric
    _record(memories, recalled, window, used)
    stats = {
        "memoriesFound": len(parts.memories),
        "memoriesInjected": len(memories),
        "recalled": len(recalled),
        "windowPairs": len(window) // 2,
        **{f"{part}Tokens": tokens for part, tokens in used.items()},
    }
    over_budget = len(parts.memories) - len(memories) + (len(parts.window) - len(window)) // 2
    left_out = {**parts.left_out, **selection.left_out}
    left_out["over_budget"] = left_out.get("over_budget", 0) + over_budget
    return MemoryContext(
        tuple(messages),
        stats,
        deep=parts.deep,
        recalled=tuple(recalled),
        left_out={reason: count for reason, count in left_out.items() if count},
        notes=notes and parts.notes,
        memories=tuple(memories),
        window=tuple(window),
    )


def _record(
    memories: list[MemoryHit],
    recalled: list[RecalledTurn],
    window: list[Turn],
    used: dict[str, int],
) -> None:
    metrics.memory_hits.add(len(memories), {"kind": "memory"})
    metrics.memory_hits.add(len(recalled), {"kind": "recall"})
    metrics.memory_hits.add(len(window) // 2, {"kind": "window_pair"})
    for score in [hit.similarity for hit in memories] + [turn.similarity for turn in recalled]:
        metrics.memory_score.record(score)
    for part, tokens in used.items():
        metrics.context_tokens.record(tokens, {"part": part})


async def _degrade(
    part: str, work: Awaitable[T], fallback: T, user_id: str, failed: list[str]
) -> T:
    try:
        with child_span(f"memory.{part}", attributes={"memory.part": part}):
            return await work
    except Exception as error:  # one part failing costs that part only
        logger.warning(
            "memory retrieval failed, continuing without it",
            extra={"part": part, "userId": user_id, "cause": f"{type(error).__name__}: {error}"},
        )
        failed.append(part)
        return fallback
