"""What names a thread's row and what a deletion of turns took: the keys every statement of
the package shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llm_bot.db.placements import tenant_of_thread


@dataclass(frozen=True)
class Taken:
    """Turns a deletion took: their users, threads and seqs, side by side, as the statements of
    what was derived from them read them (:mod:`llm_bot.lifecycle.provenance`): erasure's and
    retention's deletions name the turns they deleted, so that what was derived from them goes
    with them."""

    users: list[str]
    threads: list[str]
    seqs: list[int]

    @classmethod
    def of(cls, rows: Iterable[tuple[Any, ...]]) -> Taken:
        """From rows ``(user_id, thread_id, seq)``."""
        taken = cls([], [], [])
        for user, thread, seq in rows:
            taken.users.append(str(user))
            taken.threads.append(str(thread))
            taken.seqs.append(int(seq))
        return taken

    def __len__(self) -> int:
        return len(self.seqs)

    def sources(self) -> Taken:
        """The turns among them that anything can be derived from: a summary (seq < 0) is
        itself derived."""
        kept = zip(self.users, self.threads, self.seqs, strict=True)
        return Taken.of(row for row in kept if row[2] > 0)

    @property
    def params(self) -> dict[str, list[str] | list[int]]:
        return {"users": self.users, "threads": self.threads, "seqs": self.seqs}


def thread_row(thread_id: str) -> dict[str, str]:
    """The parameters that name a thread's row in these statements: its id and its tenant (a
    DM's user, a shared channel's own id), which routes the statement to one shard."""
    return {"tenant": tenant_of_thread(thread_id), "thread_id": thread_id}
