"""The seam between the graph and the memory layers.

``retrieve_memories`` asks a :class:`MemoryRetriever` for the memory context of one
event; the memory layers (semantic store, history, notes, recall) implement it. Without them
the graph runs with :class:`NoMemory`, which knows nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.recall import RecalledTurn
from llm_bot.memory.search import MemoryHit
from llm_bot.memory.turns.window import Turn


@dataclass(frozen=True)
class MemoryContext:
    """Every memory part of one prompt's context (notes, memories, recalled turns, the thread's
    window): messages to place between the system prompt and this run's messages, in order,
    and how many of each kind they hold. ``deep``: recall found the user deep, so the pair
    this event writes enters recall's index (:mod:`llm_bot.db.turn_index`). ``notes`` (the
    document as sent, empty when none was), ``memories``, ``recalled`` (the older turns given,
    in the order shown) and ``window``: what was given; ``left_out``: the candidates not given,
    counted by reason (another scope, below the threshold, over the budget, a duplicate). An
    answer's explanation cites them (:mod:`llm_bot.explanation`)."""

    messages: tuple[ChatMessage, ...] = ()
    stats: dict[str, int] = field(default_factory=dict)
    deep: bool = False
    recalled: tuple[RecalledTurn, ...] = ()
    left_out: dict[str, int] = field(default_factory=dict)
    notes: str = ""
    memories: tuple[MemoryHit, ...] = ()
    window: tuple[Turn, ...] = ()


class MemoryRetriever(Protocol):
    """``private``: the conversation is a DM, where what was learned in DMs may be shown;
    ``asked_at``: when the question was asked, which its relative dates count from (None: the
    time of answering)."""

    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext: ...


class NoMemory:
    """A retriever that knows nothing: the graph's default before memory is wired in."""

    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext:
        return MemoryContext()
