"""Two workers on one subscription: nothing lost, nothing doubled, per-thread order kept."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from llm_bot.events.identity import thread_id_of
from llm_bot_tools.devstack.worker_harness import Bus, running_worker, wait_until
from llm_bot_tools.local.openai_payloads import spoken_text
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ..conftest import BusFactory

pytestmark = pytest.mark.integration

THREADS = 4
PER_THREAD = 15
DOUBLED = 20  # events without an ordering key, each published twice


@pytest.fixture
def ordered_bus(make_bus: BusFactory, migrated_database_url: str) -> Bus:
    settings = {"LLM_BOT_ORDERING": "true", "LLM_BOT_MAX_IN_FLIGHT": "8"}
    return make_bus(migrated_database_url, settings, message_ordering=True)


async def test_two_workers_share_the_work_without_loss_or_duplicates_in_thread_order(
    ordered_bus: Bus, model_server: LocalModelServer
) -> None:
    bus = ordered_bus
    model_server.latency_ms = 5
    ordered = [
        prompt_event(f"{t}#{n}", user=f"u{t}", thread=f"room-{t}", egress_topic=bus.egress_topic)
        for n in range(PER_THREAD)
        for t in range(THREADS)
    ]
    doubled = [
        prompt_event(f"twice-{i}", user="u9", thread="busy", egress_topic=bus.egress_topic)
        for i in range(DOUBLED)
    ]
    egress = bus.tap(bus.egress_topic)
    async with running_worker(bus.settings()) as one, running_worker(bus.settings()) as two:
        for event in ordered:
            bus.publish_event(event, ordering_key=thread_id_of(event))
        for event in doubled + doubled:
            bus.publish_event(event)
        received = await egress.take(len(ordered) + len(doubled), timeout_s=90)
        total = len(ordered) + 2 * len(doubled)
        await wait_until(lambda: one.stats.acked + two.stats.acked == total, 60, "every copy acked")
        assert await egress.drain() == []

    documents = [json.loads(m.data) for m in received]
    ids = Counter(d["correlationId"] for d in documents)
    assert set(ids) == {e.correlation_id for e in ordered + doubled}
    assert set(ids.values()) == {1}
    sequence: dict[str, list[int]] = defaultdict(list)
    for document in documents:
        text = document["candidates"][0]["text"].removeprefix("echo: ")
        if "#" in text:
            thread, number = text.split("#")
            sequence[thread].append(int(number))
    assert all(numbers == list(range(PER_THREAD)) for numbers in sequence.values()), sequence
    prompts = Counter(
        spoken_text(r["messages"][-1]["content"]) for r in model_server.chat_requests()
    )
    assert len(prompts) == len(ordered) + len(doubled)
    assert set(prompts.values()) == {1}
    print(f"\nsplit between workers: {one.stats.received} / {two.stats.received}")
    assert one.stats.received > 0
    assert two.stats.received > 0
