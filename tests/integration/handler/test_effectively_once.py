"""Effectively once: duplicates and redeliveries yield one output from one model call; an output
stored but never confirmed (a crash between commit and publish) is published again as is."""

from __future__ import annotations

import json

import psycopg
import pytest

from llm_bot.db.processed_events import (
    Claim,
    StoredOutput,
    store_output,
    try_claim,
)
from llm_bot.events.codec import encode
from llm_bot.events.inbound import inbound_of
from llm_bot_tools.devstack.worker_harness import wait_until
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration


async def test_the_same_event_published_three_times_gives_one_candidate_from_one_model_call(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    model_server.latency_ms = 300  # the copies arrive while the first is being answered
    event = prompt_event("only once", user="u-1", thread="lobby", egress_topic=bus.egress_topic)
    data, attributes = encode(event)
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()) as worker:
        for _ in range(3):
            bus.publish(data, attributes)
        (first,) = await egress.take(1)
        await wait_until(lambda: worker.stats.duplicates == 2, 30, "both copies acked")
        assert await egress.drain() == []

    assert json.loads(first.data)["candidates"][0]["text"] == "echo: only once"
    assert len(model_server.chat_requests()) == 1
    assert (worker.stats.acked, worker.stats.nacked) == (3, 0)


async def test_a_stored_but_unconfirmed_output_is_published_again_without_the_model(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    event = prompt_event("stored", user="u-1", thread="lobby", egress_topic=bus.egress_topic)
    stored = StoredOutput(bus.egress_topic, b'{"stored":"bytes"}', {"type": "t"}, "", "OK")
    url = bus.environment["DATABASE_URL"]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        claim = await try_claim(
            connection, inbound_of(event).key, lease_s=0
        )  # its holder "crashed"
        assert isinstance(claim, Claim)
        await store_output(connection, claim, stored)

    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()) as worker:
        bus.publish_event(event)
        (message,) = await egress.take(1)
        await wait_until(lambda: worker.stats.acked == 1, 30, "the republication acked")
        # A later copy waits on the republication's claim until its "published" mark (which
        # trails the ack) is committed, then is acked without publishing.
        bus.publish_event(event)
        await wait_until(lambda: worker.stats.duplicates == 1, 30, "the copy acked")
        assert await egress.drain() == []

    assert (message.data, dict(message.attributes)) == (stored.data, {"type": "t"})
    assert model_server.chat_requests() == []
    async with await psycopg.AsyncConnection.connect(url) as connection:
        cursor = await connection.execute("SELECT published FROM processed_events")
        assert await cursor.fetchall() == [(True,)]
