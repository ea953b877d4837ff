"""What memory consolidation (:mod:`llm_bot.consolidation`) leaves on what it derives, here so
that whoever reads it back (an explanation, :mod:`llm_bot.explanation.store`) needs nothing from
the layer that writes it: the metadata keys of a derived memory, which no model's metadata may
use (:data:`llm_bot.memory.validation.RESERVED_METADATA_KEYS`), and the form of a job's id."""

from __future__ import annotations

JOB_STEP = "consolidate"
# The thread it was derived from, the job's window ("from-to"), the source turns' seqs
# ("3,5") and the time of the newest of them.
DERIVED_METADATA_KEYS = frozenset({"derivedFrom", "window", "sourceTurns", "observedAt"})


def job_id(thread_id: str, window: str) -> str:
    """A consolidation job's id: its correlation id in the processed-events ledger, and how an
    explanation names the job that derived a memory or a summary."""
    return f"{JOB_STEP}:{thread_id}:{window}"
