"""An answered event's objects are freed by reference counting the moment it is done: its
working copies, the graph's run, the recalled turns, the explanation and the commit's batch.

Whatever a reference cycle reaches waits for the cyclic garbage collector instead, which walks
it at every collection until it is found unreachable; at load every event's state, reached
through a cycle, was promoted to the oldest generation and each full collection walked tens of
thousands of such objects (docs/performance.md, "Where an event's CPU goes"), while the worker's
memory held them. So the collector is switched off while events are answered, and afterwards
none of them may be left (besides those that other tests' modules hold, counted before). The
events are answered on an event loop of their own, closed before the count: an ``asyncio`` loop
keeps a cancelled timer (and the context it was armed in) until the time it was set for, which
is not a cycle and ends on its own.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator

import pytest

from llm_bot.db.batches import Item
from llm_bot.events.models import InternalEventV2
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.transport.progress import progress_subject
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus, Published

pytestmark = pytest.mark.integration

EVENTS = 12
USERS = 3  # users come back, each time in another channel
# What an event builds that nothing outlives: its copies of the event (reached from the graph's
# run, which holds the rest of its state), its work in a commit's batch.
PER_EVENT = (InternalEventV2, Item)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def alive() -> dict[str, int]:
    """Instances of each kind (exactly: ``isinstance`` would ask every object its class, and
    some libraries' objects warn when asked)."""
    found = dict.fromkeys((kind.__name__ for kind in PER_EVENT), 0)
    for thing in gc.get_objects():
        if type(thing) in PER_EVENT:
            found[type(thing).__name__] += 1
    return found


@pytest.mark.parametrize(
    ("progress_after_ms", "progress_messages"),
    [
        ("2000", 0),  # the default: each event's progress message armed, then stopped
        ("1", EVENTS),  # sent for every event, while the model works
    ],
)
def test_answered_events_leave_nothing_for_the_cyclic_collector(
    bus: MemoryBus,
    model_server: LocalModelServer,
    collector_off: None,
    progress_after_ms: str,
    progress_messages: int,
) -> None:
    bus.publisher.create_topic(DEFAULT_EGRESS_TOPIC)  # where answers and progress messages go
    before = alive()
    published = asyncio.run(answered(bus, progress_after_ms, EVENTS + progress_messages))
    progress = [m for m in published if progress_subject(json.loads(m.data)) is not None]
    assert len(progress) == progress_messages
    assert alive() == before


async def answered(bus: MemoryBus, progress_after_ms: str, messages: int) -> list[Published]:
    """``EVENTS`` events answered; the ``messages`` published to the egress topic."""
    egress = bus.tap(DEFAULT_EGRESS_TOPIC)
    async with bus.serving(bus.settings(LLM_BOT_PROGRESS_AFTER_MS=progress_after_ms)):
        for index in range(EVENTS):
            user = f"u-{index % USERS}"
            text = f"Remember that my locker is number {index}. Which one is it?"
            bus.publish_event(
                prompt_event(
                    text, user=user, thread=f"room-{index}", egress_topic=DEFAULT_EGRESS_TOPIC
                )
            )
        published = await egress.take(messages)
        await bus.settled()
    return published
