"""Everything one event will write, collected during the run and applied at its commit.

Tools do not write to the database while the graph runs: they record what they decided here,
and the worker applies it in the transaction that also holds the history pair and the
processed-event record (one write transaction per event, docs/architecture.md). A run that fails or
is retried therefore leaves nothing behind, and a redelivered event cannot write twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Where something was learned: in a private conversation (a DM) or in a shared channel.
LearnedIn = Literal["dm", "public"]


@dataclass(frozen=True)
class MemoryPut:
    key: str
    content: str
    metadata: dict[str, str]


@dataclass
class RunWrites:
    """Puts and deletes of memories never share a key: recording one cancels the other of the
    same key, so the model's later call wins and the commit may apply them in any order."""

    user_id: str
    learned_in: LearnedIn = "public"
    memory_puts: list[MemoryPut] = field(default_factory=list)
    memory_deletes: list[str] = field(default_factory=list)  # keys, in the user's namespace
    notes: str | None = None  # the run's notes document, once read or edited
    notes_changed: bool = False

    @property
    def empty(self) -> bool:
        return not self.memory_puts and not self.memory_deletes and not self.notes_changed

    def put_memory(self, put: MemoryPut) -> None:
        if put.key in self.memory_deletes:
            self.memory_deletes.remove(put.key)
        self.memory_puts.append(put)

    def delete_memory(self, key: str) -> None:
        self.memory_puts = [put for put in self.memory_puts if put.key != key]
        if key not in self.memory_deletes:
            self.memory_deletes.append(key)

    def puts_key(self, key: str) -> bool:
        """Whether this run writes ``key`` (a memory that may not be in the store yet)."""
        return any(put.key == key for put in self.memory_puts)
