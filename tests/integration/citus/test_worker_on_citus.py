"""A worker on the local Citus cluster, through its coordinator: the events of many users leave
their rows on both worker nodes, each user's on the node of the user's shard; one event of a
DM commits on one node without two-phase commit; one in a shared channel writes its author's
node and its channel's, all or nothing (docs/citus.md, "The shard key")."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from llm_bot.db.migrate import migrate
from llm_bot.events.identity import thread_id_of
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import InternalEventV2
from llm_bot_tools.devstack.worker_harness import Bus, running_worker, wait_until
from llm_bot_tools.local.citus_cluster import CitusCluster

from .shards import (
    PREPARE,
    WRITE,
    NodeLogs,
    at_commit,
    dm,
    first_on,
    node_port_of,
    prepared_transactions,
    said_in,
    shard_name,
    shard_placements,
    shared_channel_on,
    tenants_by_node,
)

pytestmark = [pytest.mark.integration, pytest.mark.citus]

USERS = 40
CHANNELS = 4
TABLES = ("processed_events", "conversation_turns", "conversation_threads", "channel_turns")
REFUSE = "RAISE EXCEPTION 'this node refuses the commit (a test''s fault)';"


async def test_events_of_many_users_through_the_coordinator_are_on_both_worker_nodes(
    citus_cluster: CitusCluster, citus_bus: Bus, unique_name: str
) -> None:
    bus = citus_bus
    users = [f"{unique_name}-u{n}" for n in range(USERS)]
    topic = bus.egress_topic
    events = [dm(f"hello {u}", user=u, channel="desk", egress_topic=topic) for u in users]
    events += [
        said_in(f"hi all, {u}", user=u, channel=f"room-{n % CHANNELS}", egress_topic=topic)
        for n, u in enumerate(users)
    ]
    egress = bus.tap(bus.egress_topic)
    async with running_worker(bus.settings(LLM_BOT_MAX_IN_FLIGHT="16")):
        for event in events:
            bus.publish_event(event)
        received = await egress.take(len(events), timeout_s=120)
    assert {json.loads(m.data)["correlationId"] for m in received} == {
        e.correlation_id for e in events
    }

    workers = {worker.port for worker in citus_cluster.workers}
    channels = {thread_id_of(e) for e in events[USERS:]}
    with psycopg.connect(bus.environment["DATABASE_URL"]) as conn:
        placements = {table: shard_placements(conn, table) for table in TABLES}
        turns = tenants_by_node(conn, "conversation_turns", "user_id")
        records = tenants_by_node(conn, "processed_events", "user_id")
        threads = tenants_by_node(conn, "conversation_threads", "tenant")
        windows = tenants_by_node(conn, "channel_turns", "thread_id")
        home = {u: node_port_of(conn, "conversation_turns", u) for u in [*users, *channels]}
    assert all(set(by_node) == workers for by_node in placements.values()), placements
    # Each user's turns and records, a DM's thread and a channel's counter and window: on the
    # one node of the tenant's shard, and the users are spread over both nodes.
    assert turns == {user: {home[user]} for user in users}
    assert records == turns
    assert threads == {tenant: {home[tenant]} for tenant in [*users, *channels]}
    assert windows == {channel: {home[channel]} for channel in channels}
    assert {home[user] for user in users} == workers
    assert prepared_transactions(citus_cluster, unique_name) == dict.fromkeys(
        (node.name for node in citus_cluster.nodes), 0
    )


def published(url: str, event: InternalEventV2) -> bool:
    key = inbound_of(event).key
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT published FROM processed_events"
            " WHERE user_id = %s AND correlation_id = %s AND step_key = %s",
            (key.user_id, key.correlation_id, key.step),
        ).fetchone()
    return bool(row and row[0])


async def answered(bus: Bus, event: InternalEventV2) -> None:
    """Publish ``event``, await its output and its "published" mark (a later, deferred commit),
    so everything it commits is committed."""
    egress = bus.tap(bus.egress_topic)
    bus.publish_event(event)
    (output,) = await egress.take(1)
    assert json.loads(output.data)["correlationId"] == event.correlation_id
    url = bus.environment["DATABASE_URL"]
    await wait_until(lambda: published(url, event), 10, "the published mark")


async def test_a_dm_event_commits_on_one_node_and_a_shared_channels_on_two_by_two_phase_commit(
    citus_cluster: CitusCluster, citus_bus: Bus, unique_name: str
) -> None:
    bus = citus_bus
    url = bus.environment["DATABASE_URL"]
    migrate(url)
    home, other = citus_cluster.workers
    with psycopg.connect(url, autocommit=True) as conn:
        # Reaches the worker nodes too: each logs what the coordinator sends it.
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET log_statement = 'all'").format(
                sql.Identifier(unique_name)
            )
        )
        names = (f"{unique_name}-u{n}" for n in range(1000))
        user = first_on(conn, "conversation_turns", home.port, names)
        channel = shared_channel_on(conn, other.port, unique_name)

    def event(text: str, *, shared: bool) -> InternalEventV2:
        kind = said_in if shared else dm
        return kind(text, user=user, channel=channel, egress_topic=bus.egress_topic)

    # Leases renewed no sooner than in 60 s: a renewal is the worker's, not the event's.
    async with running_worker(bus.settings(LLM_BOT_CLAIM_LEASE_S="120")):
        await answered(bus, event("hello, I like sailing", shared=False))
        logs = NodeLogs(citus_cluster.workers, unique_name)
        direct = event("what do I like doing?", shared=False)
        await answered(bus, direct)
        dm_logged = logs.messages()
        logs.mark()
        await answered(bus, event("hello everyone", shared=True))
        shared_logged = logs.messages()

    writes = {name: [m for m in logged if WRITE.match(m)] for name, logged in dm_logged.items()}
    assert any(inbound_of(direct).key.source in m for m in writes[home.name]), dm_logged[home.name]
    assert writes[other.name] == [], "a DM event writes its user's node alone"
    assert not [m for logged in dm_logged.values() for m in logged if PREPARE in m], dm_logged
    # The same evidence shows a two-phase commit: the shared channel's event makes one.
    assert all(any(PREPARE in m for m in logged) for logged in shared_logged.values())
    assert prepared_transactions(citus_cluster, unique_name) == dict.fromkeys(
        (node.name for node in citus_cluster.nodes), 0
    )


def channel_state(url: str, user: str, channel: str) -> tuple[int, int, int, int]:
    """The author's turns, the channel's counter, its window's rows and the stored outputs."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM conversation_turns WHERE user_id = %(user)s),"
            " (SELECT last_seq FROM conversation_threads"
            "   WHERE tenant = %(channel)s AND thread_id = %(channel)s),"
            " (SELECT count(*) FROM channel_turns WHERE thread_id = %(channel)s),"
            " (SELECT count(*) FROM processed_events"
            "   WHERE user_id = %(user)s AND output_data IS NOT NULL)",
            {"user": user, "channel": channel},
        ).fetchone()
    assert row is not None
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]))


async def test_a_shared_channel_event_whose_channel_node_fails_to_commit_leaves_nothing(
    citus_cluster: CitusCluster, citus_bus: Bus, unique_name: str
) -> None:
    bus = citus_bus
    url = bus.environment["DATABASE_URL"]
    migrate(url)
    author_node, channel_node = citus_cluster.workers
    with psycopg.connect(url) as conn:
        names = (f"{unique_name}-u{n}" for n in range(1000))
        user = first_on(conn, "conversation_turns", author_node.port, names)
        channel = shared_channel_on(conn, channel_node.port, unique_name)
        thread = thread_id_of(said_in("", user=user, channel=channel, egress_topic="-"))
        window_shard = shard_name(conn, "channel_turns", thread)

    def said(text: str) -> InternalEventV2:
        return said_in(text, user=user, channel=channel, egress_topic=bus.egress_topic)

    refused = said("this one fails on the channel's node")
    dead_letters = bus.deadletter_tap()
    async with running_worker(bus.settings()):
        await answered(bus, said("hello everyone"))
        assert channel_state(url, user, thread) == (2, 2, 2, 1)
        with at_commit(channel_node, unique_name, window_shard, REFUSE):
            bus.publish_event(refused)
            (dead,) = await dead_letters.take(1)
        # Nothing of the refused event on either node: neither its author's turns and output
        # nor the channel's counter and window.
        assert channel_state(url, user, thread) == (2, 2, 2, 1)
        assert prepared_transactions(citus_cluster, unique_name) == dict.fromkeys(
            (node.name for node in citus_cluster.nodes), 0
        )
        await answered(bus, said("and hello again"))
    assert refused.correlation_id.encode() in dead.data
    assert b"refuses the commit" in dead.data
    assert channel_state(url, user, thread) == (4, 4, 4, 2)
