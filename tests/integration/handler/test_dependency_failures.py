"""The model failing (500s, then hanging past its timeout) and Postgres restarting mid-run: no
event is lost, and the retried events succeed once the dependency is back."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration

EVENTS = 24
# Above the failures one event can meet, so nothing is given up as ERROR in this drill.
ATTEMPTS = "100"


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A server of our own, since this test stops and starts it."""
    with EmbeddedPostgres(tmp_path / "pgdata") as postgres:
        yield postgres


@pytest.fixture
def restart_bus(
    make_bus: BusFactory, unique_name: str, own_postgres: EmbeddedPostgres
) -> MemoryBus:
    settings = {
        "LLM_BOT_MAX_DELIVERY_ATTEMPTS": ATTEMPTS,
        # A claim whose release failed while Postgres was down blocks its event for this
        # deadline (+5 s lease margin) before another delivery may take it over.
        "LLM_BOT_EVENT_DEADLINE_MS": "10000",
        "LLM_BOT_MAX_IN_FLIGHT": "8",
    }
    database_url = own_postgres.create_database(unique_name.replace("-", "_"))
    return make_bus(database_url, settings)


async def test_model_outage_and_postgres_restart_lose_nothing(
    restart_bus: MemoryBus, model_server: LocalModelServer, own_postgres: EmbeddedPostgres
) -> None:
    bus = restart_bus
    events = [
        prompt_event(f"question {i}", user="u", thread=f"t{i % 3}", egress_topic=bus.egress_topic)
        for i in range(EVENTS)
    ]
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()) as worker:
        model_server.fail_next(40, status=500)
        model_server.hang_next(6, seconds=2.5)
        for event in events[: EVENTS // 2]:
            bus.publish_event(event)
        first = await egress.take(4, timeout_s=90)
        await asyncio.to_thread(own_postgres.stop)
        for event in events[EVENTS // 2 :]:
            bus.publish_event(event)
        await asyncio.to_thread(own_postgres.start)
        rest = await egress.take(EVENTS - len(first), timeout_s=120)
        assert await egress.drain() == []

    documents = [json.loads(m.data) for m in first + rest]
    assert Counter(d["correlationId"] for d in documents) == Counter(
        e.correlation_id for e in events
    )
    assert {d["routing"]["slip"][0]["status"] for d in documents} == {"OK"}
    assert worker.stats.nacked > 0, "the drill should have forced retries"
    print(f"\ncounts: {worker.stats.as_dict()}")
