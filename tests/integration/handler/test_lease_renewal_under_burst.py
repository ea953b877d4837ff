"""A burst of a few users' events through the worker's handler, with the shortest claim lease
(a heartbeat every 0.25 s): while the group committer stores the outputs and "published" marks
of some held claims, the heartbeat renews the leases of all of them, the same rows, again and
again. Renewal takes no row another transaction holds, so PostgreSQL breaks no deadlock in the
test's database over the burst (``pg_stat_database``, on every node under ``--database=citus``)
and every renewal succeeds."""

from __future__ import annotations

import asyncio

import pytest

from llm_bot_tools.bench.deadlocks import deadlocks
from llm_bot_tools.local.citus_cluster import CitusCluster
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...conftest import DatabaseServer
from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration

USERS = 2
CHANNELS = 8
EVENTS = 480
IN_FLIGHT = "64"
LEASE_S = "1"  # the shortest the settings allow: four heartbeats a second
MODEL_LATENCY_MS = 200.0  # claims held for a heartbeat or two each


def database_urls(server: DatabaseServer, database: str, url: str) -> list[str]:
    """The test's database on every server that holds its rows."""
    if isinstance(server, CitusCluster):
        return [node.url_for(database) for node in server.nodes]
    return [url]


async def test_a_burst_of_few_users_renews_every_lease_without_a_deadlock(
    bus: MemoryBus,
    model_server: LocalModelServer,
    database_server: DatabaseServer,
    fresh_database_url: str,
    unique_name: str,
) -> None:
    urls = database_urls(database_server, unique_name, fresh_database_url)
    before = await asyncio.to_thread(deadlocks, urls)
    model_server.latency_ms = MODEL_LATENCY_MS
    egress = bus.tap(bus.egress_topic)
    settings = bus.settings(LLM_BOT_CLAIM_LEASE_S=LEASE_S, LLM_BOT_MAX_IN_FLIGHT=IN_FLIGHT)
    async with bus.serving(settings) as serving:
        for n in range(EVENTS):
            user, channel = f"user-{n % USERS}", f"channel-{n % CHANNELS}"
            bus.publish_event(
                prompt_event(
                    f"message {n}", user=user, thread=channel, egress_topic=bus.egress_topic
                )
            )
        await egress.take(EVENTS, timeout_s=180)
        await bus.settled()
    after = await asyncio.to_thread(deadlocks, urls)  # once the handler's sessions ended
    deadlocked, failed = after - before, serving.stats.lease_renewals_failed
    assert (deadlocked, failed) == (0, 0), f"{deadlocked} deadlock(s), {failed} failed renewal(s)"
    assert serving.stats.acked == EVENTS
