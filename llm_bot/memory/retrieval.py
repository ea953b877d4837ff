"""The seam between the graph and the memory layers.

``retrieve_memories`` asks a :class:`MemoryRetriever` for the context of one event; the memory
layers (semantic store, history, notes, recall) implement it. Until they exist the graph runs
with :class:`NoMemory`, which recalls nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from llm_bot.llm.messages import ChatMessage


@dataclass(frozen=True)
class Recollection:
    """What the memory layers recall for one prompt: messages to place between the system prompt
    and this run's messages, in order, and how many of each kind they hold."""

    messages: tuple[ChatMessage, ...] = ()
    stats: dict[str, int] = field(default_factory=dict)


class MemoryRetriever(Protocol):
    """``private``: the conversation is a DM, where what was learned in DMs may be shown."""

    async def retrieve(
        self, user_id: str, thread_id: str, query: str, *, private: bool
    ) -> Recollection: ...


class NoMemory:
    """A retriever that knows nothing: the graph's default before memory is wired in."""

    async def retrieve(
        self, user_id: str, thread_id: str, query: str, *, private: bool
    ) -> Recollection:
        return Recollection()
