"""What names a thread's row and what a deletion of turns took: the keys every statement of
the package shares."""

from __future__ import annotations

from dataclasses import dataclass

from llm_bot.db.placements import tenant_of_thread

# What a deletion of turns took (:mod:`llm_bot.lifecycle.provenance`): erasure's and
# retention's name the turns they deleted, so that what was derived from them goes with them.
TAKEN = " RETURNING user_id, thread_id, seq"


@dataclass(frozen=True)
class Taken:
    """Turns a deletion took (:data:`TAKEN`): their users, threads and seqs, side by side, as
    the statements of what was derived from them read them."""

    users: list[str]
    threads: list[str]
    seqs: list[int]

    @property
    def params(self) -> dict[str, list[str] | list[int]]:
        return {"users": self.users, "threads": self.threads, "seqs": self.seqs}


def thread_row(thread_id: str) -> dict[str, str]:
    """The parameters that name a thread's row in these statements: its id and its tenant (a
    DM's user, a shared channel's own id), which routes the statement to one shard."""
    return {"tenant": tenant_of_thread(thread_id), "thread_id": thread_id}
