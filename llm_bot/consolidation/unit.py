"""One consolidation job, its steps top to bottom as :mod:`llm_bot.answer` reads one event's:
the window's turns, what each speaker's memory already holds, the model's derivation (one
call, its reply checked, :mod:`.extraction`), the facts' vectors and keys, then the writes, in
the transaction that records the job done in the processed-events ledger, so they commit once
or not at all (:mod:`.derive` says what the writes hold to).

Taking the job off its subscription, claiming its row, the attempt rule and the settlement are
the transport's (:mod:`llm_bot.transport.consolidation`), as for an event.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection

from llm_bot.consolidation.derive import Applied, Consolidator, Planned
from llm_bot.consolidation.extraction import WindowTurn
from llm_bot.consolidation.jobs import Job
from llm_bot.db.embedding_space import EmbeddingSpace

logger = logging.getLogger(__name__)

# The job's writes, given the transaction and the embedding space its ledger record read.
Write = Callable[[AsyncConnection[Any], EmbeddingSpace | None], Awaitable[None]]
# Runs a write in the transaction that records the job done.
Commit = Callable[[Write], Awaitable[None]]


class JobUnit:
    """A job's work from its window to its committed writes (the module's docstring)."""

    def __init__(self, consolidator: Consolidator) -> None:
        self._consolidator = consolidator

    async def window(self, job: Job) -> list[WindowTurn]:
        """The window's turns, oldest first; none when the thread or its users were erased."""
        return await self._consolidator.window(job)

    async def work(self, job: Job, window: list[WindowTurn], commit: Commit) -> Applied:
        """Derive from ``window`` and write it through ``commit``; raises the model's errors
        and :class:`~llm_bot.consolidation.extraction.InvalidOutput`."""
        consolidator = self._consolidator
        speakers = sorted({turn.user_id for turn in window if turn.role == "user"})
        known = await consolidator.known(job, speakers)
        derived, usage = await consolidator.derive(window, known, None)
        summary = [derived.summary] if derived.summary is not None else []
        vectors = await consolidator.vectors([fact.content for fact in derived.facts] + summary)
        fact_vectors = vectors[: len(derived.facts)]
        planned = Planned(
            keys=await consolidator.keys(derived.facts, fact_vectors),
            fact_vectors=fact_vectors,
            summary_vector=vectors[-1] if summary else None,
        )
        applied: list[Applied] = []

        async def write(connection: AsyncConnection[Any], space: EmbeddingSpace | None) -> None:
            applied.append(
                await consolidator.apply(connection, job, window, derived, planned, space)
            )

        await commit(write)
        logger.info(
            "consolidation job done",
            extra={
                "job": job.key.correlation_id,
                "facts": applied[-1].facts,
                "factsDropped": derived.dropped,
                "sourcesGone": applied[-1].sources_gone,
                "summaries": applied[-1].summaries,
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
            },
        )
        return applied[-1]
