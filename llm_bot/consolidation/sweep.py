"""When a session closes, a job: the periodic sweep that turns closed sessions into jobs.

A thread's session closes after ``SESSION_IDLE_SECONDS`` of silence or at
``LLM_BOT_CONSOLIDATION_TURN_CAP`` turns not yet consolidated. Silence is an absence, so no
event announces it: every ``LLM_BOT_CONSOLIDATION_SWEEP_S`` the sweep reads, in one bounded
statement over a partial index of the threads with unconsolidated turns, the threads whose
window closed (:func:`llm_bot.memory.turns.consolidation.closed_windows`). Waiting for the
thread's next event instead would never consolidate the last session of a user who does not
come back, and would put the job's publish on an answer's path. The window is everything since
the last job, so a burst of sessions in a thread is one job (the debounce); a job is published,
then the thread's mark moved on from where the sweep read it, so two instances' sweeps move it
once, and a job published twice (a crash between the two steps, two sweeps) has one key in the
processed-events ledger (:mod:`.jobs`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta

from llm_bot.bus_names import prefixed
from llm_bot.clock import utc_now
from llm_bot.consolidation.jobs import JOB_TYPE, Job, encode_job
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.consolidation import closed_windows, mark_consolidated
from llm_bot.settings import Settings

logger = logging.getLogger(__name__)

SWEEP_BATCH = 100

# Publishes a message (topic, data, attributes), confirmed when it returns: the worker's
# publisher (:class:`llm_bot.transport.publisher.EventPublisher`).
Publish = Callable[[str, bytes, Mapping[str, str]], Awaitable[object]]


class Sweeper:
    """Publishes a job per thread whose session closed (the module's docstring)."""

    def __init__(self, store: MemoryStore, publish: Publish, settings: Settings) -> None:
        self._store = store
        self._publish = publish
        self._topic = prefixed(settings.consolidation_topic, settings.bus_prefix)
        self._idle = timedelta(seconds=settings.session_idle_seconds)
        self._cap = settings.consolidation_turn_cap // 2 * 2  # whole pairs
        self._interval_s = settings.consolidation_sweep_s

    async def run(self) -> None:
        """Sweep every interval until cancelled; a full batch is followed at once by the next."""
        while True:
            try:
                swept = await self.sweep()
            except Exception as error:  # a database or bus outage: the next sweep tries again
                logger.warning("consolidation sweep failed: %s", error)
                swept = 0
            if swept < SWEEP_BATCH:
                await asyncio.sleep(self._interval_s)

    async def sweep(self) -> int:
        """One batch: the jobs published."""
        idle_before = utc_now() - self._idle
        async with self._store.connection() as connection:
            windows = await closed_windows(
                connection, idle_before=idle_before, cap=self._cap, batch=SWEEP_BATCH
            )
            for thread_id, from_seq, to_seq in windows:
                await self._publish(
                    self._topic, encode_job(Job(thread_id, from_seq, to_seq)), {"type": JOB_TYPE}
                )
                await mark_consolidated(connection, thread_id, from_seq, to_seq)
                await connection.commit()
        return len(windows)
