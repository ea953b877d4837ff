"""A worker on the local Citus cluster when deliveries repeat and a node goes away: every event
published twice, and again once answered, gives one output from one model call; a worker node
stopped as a crash would stop it and started again mid-run loses no event, doubles none and
leaves no prepared transaction on any node."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import psycopg
import pytest

from llm_bot.events.models import InternalEventV2
from llm_bot_tools.devstack.worker_harness import Bus, Tap, running_worker, wait_until
from llm_bot_tools.local.citus_cluster import CitusCluster
from llm_bot_tools.local.openai_payloads import spoken_text
from llm_bot_tools.local.openai_server import LocalModelServer

from .shards import dm, prepared_transactions, said_in

pytestmark = [pytest.mark.integration, pytest.mark.citus]

USERS = 16
CHANNELS = 2


def conversation(users: list[str], topic: str, rounds: int) -> list[InternalEventV2]:
    """Each user in turn, ``rounds`` times: in a DM, then in one of the shared channels."""
    events = []
    for turn in range(rounds):
        for n, user in enumerate(users):
            kind = said_in if turn % 2 else dm
            channel = f"room-{n % CHANNELS}" if turn % 2 else "desk"
            events.append(kind(f"{user} #{turn}", user=user, channel=channel, egress_topic=topic))
    return events


def outputs_by_event(messages: list[bytes]) -> dict[str, set[bytes]]:
    copies: dict[str, set[bytes]] = defaultdict(set)
    for data in messages:
        copies[json.loads(data)["correlationId"]].add(data)
    return copies


def stored_history(url: str) -> tuple[int, int, int, int]:
    """Turns, events they came from, stored outputs, and the seqs missing in any thread."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM conversation_turns),"
            " (SELECT count(DISTINCT source_event) FROM conversation_turns),"
            " (SELECT count(*) FROM processed_events WHERE output_data IS NOT NULL),"
            " (SELECT coalesce(sum(max_seq - turns), 0) FROM (SELECT max(seq) AS max_seq,"
            "   count(*) AS turns FROM conversation_turns GROUP BY thread_id) t)"
        ).fetchone()
    assert row is not None
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]))


async def test_every_event_published_twice_and_again_once_answered_gives_one_output(
    citus_cluster: CitusCluster, citus_bus: Bus, model_server: LocalModelServer, unique_name: str
) -> None:
    bus = citus_bus
    model_server.latency_ms = 50  # the copies arrive while the first is being answered
    events = conversation([f"{unique_name}-u{n}" for n in range(USERS)], bus.egress_topic, 2)
    egress = bus.tap(bus.egress_topic)
    one_settings, two_settings = (bus.settings(LLM_BOT_MAX_IN_FLIGHT="8") for _ in range(2))
    async with running_worker(one_settings) as one, running_worker(two_settings) as two:

        def acked() -> int:
            return one.stats.acked + two.stats.acked

        for event in events + events:
            bus.publish_event(event)
        await egress.take(len(events), timeout_s=120)
        await wait_until(lambda: acked() == 2 * len(events), 60, "every copy acked")
        for event in events:  # a late redelivery: each event is answered and published
            bus.publish_event(event)
        await wait_until(lambda: acked() == 3 * len(events), 60, "every late copy acked")
        duplicates = one.stats.duplicates + two.stats.duplicates
    await egress.drain()

    copies = Counter(json.loads(m.data)["correlationId"] for m in egress.received)
    assert copies == dict.fromkeys((e.correlation_id for e in events), 1)
    assert duplicates == 2 * len(events)
    calls = Counter(spoken_text(r["messages"][-1]["content"]) for r in model_server.chat_requests())
    assert sorted(calls.values()) == [1] * len(events)
    assert stored_history(bus.environment["DATABASE_URL"]) == (
        2 * len(events),
        len(events),
        len(events),
        0,
    )
    assert set(prepared_transactions(citus_cluster, unique_name).values()) == {0}


def left_prepared(cluster: CitusCluster, url: str, database: str) -> bool:
    """Whether a node still holds a prepared transaction, once the coordinator has resolved
    those it can (its maintenance daemon does so every minute)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT recover_prepared_transactions()")
    return any(prepared_transactions(cluster, database).values())


async def until_every_event_is_out(
    tap: Tap, events: list[InternalEventV2], timeout_s: float
) -> None:
    wanted = {event.correlation_id for event in events}
    while not wanted <= set(outputs_by_event([m.data for m in tap.received])):
        await tap.take(1, timeout_s=timeout_s)


async def test_a_worker_node_stopped_and_started_mid_run_loses_no_event_and_leaves_no_prepared(
    citus_cluster: CitusCluster, citus_bus: Bus, model_server: LocalModelServer, unique_name: str
) -> None:
    bus = citus_bus
    url = bus.environment["DATABASE_URL"]
    model_server.latency_ms = 100
    events = conversation([f"{unique_name}-u{n}" for n in range(USERS)], bus.egress_topic, 4)
    victim = citus_cluster.workers[-1]
    egress = bus.tap(bus.egress_topic)
    dead_letters = bus.deadletter_tap()
    async with running_worker(bus.settings(LLM_BOT_MAX_IN_FLIGHT="8")) as worker:
        for event in events:
            bus.publish_event(event)
        await egress.take(len(events) // 4, timeout_s=60)
        citus_cluster.stop_node(victim)
        try:
            # Its users' events fail while it is down, and go back to Pub/Sub.
            await wait_until(lambda: worker.stats.nacked > 0, 60, "an event failing on the node")
        finally:
            citus_cluster.start_node(victim)
        await until_every_event_is_out(egress, events, timeout_s=180)
        await wait_until(lambda: worker.stats.acked >= len(events), 60, "every event acked")
        nacked = worker.stats.nacked
    await egress.drain()

    copies = outputs_by_event([m.data for m in egress.received])
    assert set(copies) == {event.correlation_id for event in events}
    assert all(len(outputs) == 1 for outputs in copies.values()), "a copy differed"
    assert await dead_letters.drain() == []
    assert stored_history(url) == (2 * len(events), len(events), len(events), 0)
    await wait_until(
        lambda: not left_prepared(citus_cluster, url, unique_name), 60, "no prepared transaction"
    )
    print(f"\n{nacked} deliveries nacked while {victim.name} was down")
