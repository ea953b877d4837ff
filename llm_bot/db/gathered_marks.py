"""The "published" marks (:class:`~llm_bot.db.processed_events.PublishedMarks`) gathered per
shard of the events' users.

One statement marks the gathered keys, and a claim takes them into its own statement. On Citus
a statement that writes several shards is committed by two-phase commit even when they are on
one node, and a claim carrying marks of users on another node makes its whole transaction one.
So the keys are gathered by shard: each shard's statement goes to that shard alone, rides with
the transaction of its node (:mod:`llm_bot.db.group_commit`), and a claim takes only the marks
of its own shard. On plain PostgreSQL there is one bucket, as there is one server.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable

from llm_bot.db.batches import LockKey, UserRows, Work
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.processed_events import PublishedMarks


class GatheredMarks:
    """One :class:`PublishedMarks` per shard (at most the shard count of them)."""

    def __init__(self, committer: GroupCommitter) -> None:
        self._committer = committer
        self._by_shard: dict[Hashable, PublishedMarks] = {}

    def of(self, user_id: str) -> PublishedMarks:
        """The marks of ``user_id``'s shard, deferred to the transactions of its node."""
        shard = self._committer.shard_of(user_id)
        marks = self._by_shard.get(shard)
        if marks is None:
            committer = self._committer

            def defer(work: Work, keys: Collection[LockKey]) -> None:
                # Keyed by the write itself: it orders no other work, and is placed on the
                # node of the user's shard.
                committer.defer(work, (*keys, UserRows(work, user_id)))

            marks = self._by_shard[shard] = PublishedMarks(defer)
        return marks
