"""A worker that stopped or was killed leaves no stream in the emulator that takes what is
published after it: the next reader of its subscription finds every message there at once.

Straight to the emulator, the stream of a gone worker keeps leasing new messages to nobody for
its ack deadline (10 s), so a drain, which ends after 4 s without a message, misses them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_bot_tools.devstack.worker_harness import (
    Bus,
    Tap,
    WorkerProcess,
    running_worker,
    wait_until,
)
from llm_bot_tools.local.prompt_events import prompt_event
from llm_bot_tools.local.pubsub_front import PubSubFront

pytestmark = pytest.mark.integration

LATER = 10


async def serve_one(bus: Bus) -> None:
    """Publish one event and wait for its answer: the worker's stream has pulled."""
    bus.publish_event(prompt_event("first", user="u", thread="t", egress_topic=bus.egress_topic))
    await bus.tap(bus.egress_topic).take(1)


async def assert_the_next_reader_gets_all_that_follows(bus: Bus, front: PubSubFront) -> None:
    subscription = bus.topology.input_subscription
    await wait_until(lambda: front.streams(subscription) == 0, 10, "the stream released")
    published = {bus.publish(f"later {n}".encode(), {}) for n in range(LATER)}
    drained = await Tap(bus.clients.subscriber, subscription).drain()
    assert {m.message_id for m in drained} == published


async def test_a_stopped_worker_leaves_no_stream_that_takes_later_messages(
    bus: Bus, pubsub_front: PubSubFront
) -> None:
    async with running_worker(bus.settings()):
        await serve_one(bus)
    await assert_the_next_reader_gets_all_that_follows(bus, pubsub_front)


async def test_a_killed_worker_leaves_no_stream_that_takes_later_messages(
    bus: Bus, pubsub_front: PubSubFront, tmp_path: Path
) -> None:
    worker = WorkerProcess(bus.worker_environment(), tmp_path / "worker.log").start()
    try:
        await serve_one(bus)
    finally:
        worker.kill()
    await assert_the_next_reader_gets_all_that_follows(bus, pubsub_front)
