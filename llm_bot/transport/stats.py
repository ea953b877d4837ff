"""What one worker did since it started, counted by kind and logged when it stops.

Tests and the benchmark read these numbers (in the worker's process, or from its ``/metrics``
as ``llmbot_worker_counts_total``), so each is a named field: a misspelt count is a type
error, not a new key that stays zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llm_bot.events.models import Outcome


@dataclass
class WorkerStats:
    received: int = 0  # messages handed to the handler
    acked: int = 0
    nacked: int = 0  # handed back for redelivery (failures and shutdown)
    dead_lettered: int = 0
    duplicates: int = 0  # events already answered: their stored output was used
    republished: int = 0  # of those, published again because no publish was ever confirmed
    outcome_ok: int = 0
    outcome_skip: int = 0
    outcome_error: int = 0
    transactions: int = 0  # group-commit transactions, counted when the committer closes
    committed: int = 0  # works those transactions committed
    # Batches still committing after half a second (a lock, a node), which the next ones
    # overtook (db/group_commit.py), counted when the committer closes.
    batches_overtaken: int = 0
    # Claim-lease renewals that failed (by reason: llmbot_lease_renewal_failures), counted
    # when the lease keeper closes.
    lease_renewals_failed: int = 0
    progress_sent: int = 0  # "thinking" messages Pub/Sub confirmed (transport/progress.py)

    def count_outcome(self, outcome: Outcome) -> None:
        name = f"outcome_{outcome.lower()}"
        setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
