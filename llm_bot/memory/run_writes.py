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
    user_id: str
    learned_in: LearnedIn = "public"
    memory_puts: list[MemoryPut] = field(default_factory=list)
    notes: str | None = None  # the run's notes document, once read or edited
    notes_changed: bool = False

    @property
    def empty(self) -> bool:
        return not self.memory_puts and not self.notes_changed
