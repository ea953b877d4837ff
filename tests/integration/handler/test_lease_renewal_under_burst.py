"""A burst of a few users' events through the worker's handler, with the shortest claim lease
(a heartbeat every 0.25 s): while the group committer stores the outputs and "published" marks
of some held claims, the heartbeat renews the leases of all of them, the same rows, again and
again. Renewal takes no row another transaction holds, so PostgreSQL breaks no deadlock in the
test's database over the burst (``pg_stat_database``, on every node under ``--database=citus``)
and no renewal fails for a reason of the database's."""

from __future__ import annotations

import asyncio

import pytest

from llm_bot.db.leases import HEARTBEATS_PER_LEASE
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
    migrated_database_url: str,
    unique_name: str,
) -> None:
    urls = database_urls(database_server, unique_name, migrated_database_url)
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
    assert after - before == 0, f"{after - before} deadlock(s)"
    # A renewal meets no other writer's lock, so none fails for a deadlock, a statement
    # timeout or any other reason of the database's. One still waiting for a connection or
    # running after a whole lease is cut off ("pool_timeout", "timeout"): on a machine whose
    # cores other work keeps busy, the test's one-second lease can pass first. A lease survives
    # three failed renewals in a row, so fewer than four cut off in the whole burst let no
    # lease lapse.
    reasons = serving.lease_failures
    assert reasons.total() == serving.stats.lease_renewals_failed
    assert set(reasons) <= {"pool_timeout", "timeout"}, reasons
    assert reasons.total() < HEARTBEATS_PER_LEASE, reasons
    assert serving.stats.acked == EVENTS
