"""What the console's pages show, read with the statements of the tables' owners and, for "try
a recall", the worker's own retrieval (:meth:`PostgresMemoryRetriever.consider`) and search.

Each read is bounded: a user's newest ``LIST_LIMIT`` memories, earlier versions, turns, events
and views. Memories, turns, events and views are read one beyond the limit, so that the page
says when the user has more than it lists instead of passing the newest for all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import get_args

from llm_bot.db import console_views
from llm_bot.db.hybrid import SearchMode
from llm_bot.db.processed_events.records import EventRecord, recent_events_of_user
from llm_bot.memory.budget import MEMORY_CANDIDATES
from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
from llm_bot.memory.memories import Memory
from llm_bot.memory.notes_store import Notes, read_notes
from llm_bot.memory.recall import recall
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.reads import StoredTurn, recent_turns_of_user, users_between
from llm_bot.memory.versions import Version, recent_versions_of_user

LIST_LIMIT = 200
FOUND_LIMIT = 50
MODES: tuple[SearchMode, ...] = get_args(SearchMode)
RECALL_SHOWN = 20  # recall's candidates listed per mode


@dataclass(frozen=True)
class UserData:
    memories: list[Memory]
    versions: dict[str, list[Version]]
    notes: Notes
    turns: list[StoredTurn]
    events: list[EventRecord]
    views: list[console_views.View]
    cut: frozenset[str]  # of "memories", "turns", "events", "views": the user has more


@dataclass
class Candidate:
    """One memory or older message as the three search modes scored it, and what the worker
    made of it."""

    label: str  # a memory's key, a turn's thread and seq
    content: str
    similarity: float
    scores: dict[str, float] = field(default_factory=dict)  # fused score per mode
    found: bool = False  # retrieval returned it (passed its threshold and filters)
    injected: bool = False  # it entered the prompt within the budget
    extra: str = ""  # a turn's role and time


@dataclass(frozen=True)
class Trial:
    threshold: float
    memories: list[Candidate]
    recalled: list[Candidate]
    window_turns: int
    left_out: dict[str, int]
    failed: list[str]


async def users_starting(store: MemoryStore, prefix: str) -> list[str]:
    """Users whose id starts with ``prefix``, in order."""
    async with store.connection() as connection:
        return await users_between(connection, prefix, prefix + "\U0010ffff", FOUND_LIMIT)


async def user_data(store: MemoryStore, user_id: str, agent: str) -> UserData:
    beyond = LIST_LIMIT + 1  # one more than is shown: whether the user has more
    memories = await store.for_user(user_id).list_memories(limit=beyond)
    async with store.connection() as connection:
        versions = await recent_versions_of_user(connection, user_id, LIST_LIMIT)
        history = await recent_turns_of_user(connection, user_id, beyond)
        events = await recent_events_of_user(connection, user_id, beyond)
        notes = await read_notes(connection, user_id, agent)
        views = await console_views.recent_views(connection, user_id, beyond)
    lengths = {
        "memories": len(memories),
        "turns": len(history),
        "events": len(events),
        "views": len(views),
    }
    cut = frozenset(name for name, length in lengths.items() if length > LIST_LIMIT)
    return UserData(
        memories[:LIST_LIMIT],
        versions,
        notes,
        history[:LIST_LIMIT],
        events[:LIST_LIMIT],
        views[:LIST_LIMIT],
        cut,
    )


async def try_recall(
    store: MemoryStore,
    retriever: PostgresMemoryRetriever,
    limits: ContextLimits,
    user_id: str,
    thread_id: str,
    query: str,
    *,
    private: bool,
) -> Trial:
    """The worker's retrieval for ``query`` as ``user_id`` asking in ``thread_id`` (a DM when
    ``private``), and every candidate's scores in each search mode."""
    parts, given, failed = await retriever.consider(user_id, thread_id, query, private=private)
    include_private = private or limits.private_in_public
    [vector] = await store.embedder.embed([query])  # the retrieval's, from the cache
    memories: dict[str, Candidate] = {}
    recalled: dict[str, Candidate] = {}
    exclude = {(turn.thread_id, turn.seq) for turn in parts.window}
    for mode in MODES:
        hits = await store.for_user(user_id).search(
            query,
            limit=MEMORY_CANDIDATES,
            threshold=-1.0,
            mode=mode,
            vector=vector,
            include_private=include_private,
        )
        for hit in hits:
            memory = memories.setdefault(hit.key, Candidate(hit.key, hit.content, hit.similarity))
            memory.scores[mode] = hit.fused_score
        async with store.connection() as connection:
            found = await recall(
                connection,
                user_id,
                query,
                vector,
                exclude=exclude,
                limit=RECALL_SHOWN,
                threshold=-1.0,
                mode=mode,
                include_private=include_private,
            )
        for turn in found.turns:
            label = f"{turn.thread_id} #{turn.seq}"
            candidate = recalled.setdefault(
                label,
                Candidate(
                    label, turn.content, turn.similarity, extra=_when(turn.role, turn.created_at)
                ),
            )
            candidate.scores[mode] = turn.fused_score
    _mark(memories, [hit.key for hit in parts.memories], found=True)
    _mark(memories, [hit.key for hit in given.memories], injected=True)
    _mark(recalled, [f"{turn.thread_id} #{turn.seq}" for turn in parts.recalled], found=True)
    _mark(recalled, [f"{turn.thread_id} #{turn.seq}" for turn in given.recalled], injected=True)
    return Trial(
        limits.threshold,
        _ranked(memories),
        _ranked(recalled),
        len(given.window),
        {reason: count for reason, count in given.left_out.items() if count},
        failed,
    )


def _mark(
    candidates: dict[str, Candidate],
    labels: list[str],
    *,
    found: bool = False,
    injected: bool = False,
) -> None:
    """Retrieval's own verdict on the candidates the modes listed (one it found that no mode
    listed is left out: the modes read the same candidates, so none is)."""
    for label in labels:
        if (candidate := candidates.get(label)) is not None:
            candidate.found = candidate.found or found or injected
            candidate.injected = candidate.injected or injected


def _when(role: str, at: datetime) -> str:
    return f"{role}, {at:%Y-%m-%d %H:%M} UTC"


def _ranked(candidates: dict[str, Candidate]) -> list[Candidate]:
    return sorted(
        candidates.values(),
        key=lambda c: (not c.injected, not c.found, -c.scores.get("hybrid", 0.0), c.label),
    )
