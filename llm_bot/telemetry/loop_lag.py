"""Event-loop lag: how late the loop runs a callback that is due.

Everything a worker does shares one event loop, so when it is saturated every await (a
database round trip, a model reply) is answered late by as much as one turn of the loop takes.
That shows up as slower stages everywhere at once; this metric names the cause.
"""

from __future__ import annotations

import asyncio

from llm_bot.telemetry import metrics

PROBE_INTERVAL_S = 0.25


async def watch_loop_lag(interval_s: float = PROBE_INTERVAL_S) -> None:
    """Runs until cancelled, recording each probe's delay past its due time."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        metrics.loop_lag.record(max(0.0, loop.time() - due))
