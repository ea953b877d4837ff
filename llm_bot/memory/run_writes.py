"""Everything one event will write, collected during the run and applied at its commit.

Tools do not write to the database while the graph runs: they record what they decided here,
and the worker applies it in the transaction that also holds the history pair and the
processed-event record (one write transaction per event, docs/architecture.md). A run that fails or
is retried therefore leaves nothing behind, and a redelivered event cannot write twice.

A model can be steered by what it reads, so one event's writes are bounded: ``max_writes``
(``MEMORY_MAX_WRITES_PER_EVENT``) counts every accepted memory put, delete and notes edit; the
tools refuse the ones beyond it, and the model is told why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Who may see what a conversation taught: learned in a private conversation (a DM), it is shown
# only in DMs; learned in a shared channel, it is public.
Visibility = Literal["dm", "public"]


@dataclass(frozen=True)
class MemoryPut:
    key: str
    content: str
    metadata: dict[str, str]
    new: bool = False  # a key not in the store: counts against the user's cap


@dataclass(frozen=True)
class NotesEdit:
    """One edit of the notes document, as the model asked it. The commit applies the run's
    edits again to the document as it is then, so an edit of a concurrent event is kept."""

    operation: str
    content: str | None
    header: str | None


@dataclass
class RunWrites:
    """Puts and deletes of memories never share a key: recording one cancels the other of the
    same key, so the model's later call wins and the commit may apply them in any order."""

    user_id: str
    visibility: Visibility = "public"
    max_writes: int = 20
    memory_puts: list[MemoryPut] = field(default_factory=list)
    memory_deletes: list[str] = field(default_factory=list)  # keys, in the user's namespace
    notes: str | None = None  # the run's view of the notes document, once read
    notes_edits: list[NotesEdit] = field(default_factory=list)
    writes_made: int = 0
    # Recall found the user deep: the event's pair enters recall's index (llm_bot.db.turn_index).
    index_turns: bool = False

    @property
    def empty(self) -> bool:
        return not self.memory_puts and not self.memory_deletes and not self.notes_edits

    def refusal(self) -> str | None:
        """The tool result for a write beyond ``max_writes``, or None while one is allowed."""
        if self.writes_made < self.max_writes:
            return None
        return (
            f"error: not saved: this message already made {self.writes_made} memory writes,"
            " the most one message may make"
        )

    def put_memory(self, put: MemoryPut) -> None:
        """A later put of a key replaces the run's earlier one: the commit writes its last text."""
        if put.key in self.memory_deletes:
            self.memory_deletes.remove(put.key)
        self.memory_puts = [earlier for earlier in self.memory_puts if earlier.key != put.key]
        self.memory_puts.append(put)
        self.writes_made += 1

    def key_of(self, content: str) -> str | None:
        """The key this run put ``content`` under, if it did: saved again, it is that memory."""
        return next((put.key for put in self.memory_puts if put.content == content), None)

    def delete_memory(self, key: str) -> None:
        self.memory_puts = [put for put in self.memory_puts if put.key != key]
        if key not in self.memory_deletes:
            self.memory_deletes.append(key)
        self.writes_made += 1

    def edit_notes(self, edit: NotesEdit, updated: str) -> None:
        self.notes = updated
        self.notes_edits.append(edit)
        self.writes_made += 1

    def puts_key(self, key: str) -> bool:
        """Whether this run writes ``key`` (a memory that may not be in the store yet)."""
        return any(put.key == key for put in self.memory_puts)
