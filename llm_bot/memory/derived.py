"""What memory consolidation (:mod:`llm_bot.consolidation`) leaves on what it derives, written
and read here so that whoever reads it back (an explanation, :mod:`llm_bot.explanation.reader`;
recall; the evaluation) needs nothing from the layer that writes it: a derived memory's metadata
(keys no model's metadata may use, :data:`llm_bot.memory.validation.RESERVED_METADATA_KEYS`),
the form of a job's id, and the window a session summary's row covers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

JOB_STEP = "consolidate"
# The thread it was derived from, the job's window ("from-to"), the source turns' seqs
# ("3,5") and the time of the newest of them.
DERIVED_METADATA_KEYS = frozenset({"derivedFrom", "window", "sourceTurns", "observedAt"})


def job_id(thread_id: str, window: str) -> str:
    """A consolidation job's id: its correlation id in the processed-events ledger, and how an
    explanation names the job that derived a memory or a summary."""
    return f"{JOB_STEP}:{thread_id}:{window}"


@dataclass(frozen=True)
class DerivedFrom:
    """Where a derived memory came from: its thread, its job's window and its source turns."""

    thread_id: str
    window: str
    source_seqs: tuple[int, ...]

    @property
    def job(self) -> str:
        return job_id(self.thread_id, self.window)


def derived_metadata(
    thread_id: str, window: str, source_seqs: Iterable[int], observed_at: datetime
) -> dict[str, str]:
    """The metadata a derived memory is written with."""
    return {
        "derivedFrom": thread_id,
        "window": window,
        "sourceTurns": ",".join(str(seq) for seq in source_seqs),
        "observedAt": observed_at.isoformat(),
    }


def derived_from(metadata: Mapping[str, Any]) -> DerivedFrom | None:
    """Where the memory with ``metadata`` was derived from; None for one a model or an import
    wrote (or metadata that is no derivation's)."""
    thread, window, sources = (metadata.get(k) for k in ("derivedFrom", "window", "sourceTurns"))
    if not isinstance(thread, str) or not isinstance(window, str) or not isinstance(sources, str):
        return None
    seqs = sources.split(",")
    if not all(seq.isdigit() for seq in seqs):
        return None
    return DerivedFrom(thread, window, tuple(int(seq) for seq in seqs))


def summary_window(seq: int, pair_index: int) -> tuple[int, int]:
    """The turns ``(after, last]`` a session summary's row covers: it is stored under minus the
    last seq it covers, its pair index the seq before the first (migration 0022,
    :func:`llm_bot.memory.turns.consolidation.insert_summary`)."""
    return pair_index, -seq
