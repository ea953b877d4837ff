"""The local stack the other integration tests stand on: the emulator and embedded Postgres."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from google.api_core.exceptions import DeadlineExceeded
from google.cloud import pubsub_v1
from google.pubsub_v1.types import ReceivedMessage

from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.processes import group_members, group_running, running
from llm_bot_tools.local.pubsub_emulator import (
    EmulatorError,
    PubSubClients,
    PubSubEmulator,
    pubsub_clients,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def clients(pubsub_emulator: PubSubEmulator) -> Iterator[PubSubClients]:
    bound = pubsub_clients(pubsub_emulator.host)
    yield bound
    bound.close()


def pull_until(
    subscriber: pubsub_v1.SubscriberClient,
    subscription: str,
    count: int = 1,
    timeout_s: float = 30.0,
) -> list[ReceivedMessage]:
    """Pull until `count` messages arrived; the emulator may answer a pull with nothing."""
    received: list[ReceivedMessage] = []
    deadline = time.monotonic() + timeout_s
    while len(received) < count and time.monotonic() < deadline:
        try:
            response = subscriber.pull(
                subscription=subscription, max_messages=count - len(received), timeout=5.0
            )
        except DeadlineExceeded:
            continue
        received.extend(response.received_messages)
    assert len(received) >= count, f"got {len(received)} of {count} messages from {subscription}"
    return received


def test_publish_then_pull_returns_data_and_attributes(
    pubsub_emulator: PubSubEmulator, clients: PubSubClients, unique_name: str
) -> None:
    project = pubsub_emulator.project
    topic = clients.publisher.topic_path(project, unique_name)
    subscription = clients.subscriber.subscription_path(project, unique_name)
    clients.publisher.create_topic(name=topic)
    clients.subscriber.create_subscription(name=subscription, topic=topic)

    clients.publisher.publish(topic, b'{"hello": 1}', kind="test", origin="pytest").result(10)

    [message] = pull_until(clients.subscriber, subscription)
    assert message.message.data == b'{"hello": 1}'
    assert dict(message.message.attributes) == {"kind": "test", "origin": "pytest"}
    clients.subscriber.acknowledge(subscription=subscription, ack_ids=[message.ack_id])


def test_env_points_at_the_emulator(pubsub_emulator: PubSubEmulator) -> None:
    assert pubsub_emulator.env() == {
        "PUBSUB_EMULATOR_HOST": pubsub_emulator.host,
        "GOOGLE_CLOUD_PROJECT": "llm-bot-test",
    }
    assert pubsub_emulator.host.startswith("127.0.0.1:")


def test_create_topology_creates_everything_once(
    pubsub_emulator: PubSubEmulator, clients: PubSubClients, unique_name: str
) -> None:
    names = {
        "input_topic": f"{unique_name}.in",
        "subscription": f"{unique_name}.in-worker",
        "deadletter_topic": f"{unique_name}.dlq",
    }
    outputs = [f"{unique_name}.next", f"{unique_name}.egress"]
    topology = pubsub_emulator.create_topology(**names, output_topics=outputs)
    again = pubsub_emulator.create_topology(**names, output_topics=outputs)
    assert again == topology

    project_path = f"projects/{pubsub_emulator.project}"
    topics = {t.name for t in clients.publisher.list_topics(project=project_path)}
    assert {topology.input_topic, topology.deadletter_topic, *topology.output_topics.values()} <= (
        topics
    )
    subscriptions = {
        s.name: s.topic for s in clients.subscriber.list_subscriptions(project=project_path)
    }
    assert subscriptions[topology.input_subscription] == topology.input_topic
    assert subscriptions[topology.deadletter_subscription] == topology.deadletter_topic
    for topic, tap in topology.output_subscriptions.items():
        assert subscriptions[tap] == topology.output_topics[topic]

    policy = clients.subscriber.get_subscription(
        subscription=topology.input_subscription
    ).dead_letter_policy
    assert policy.dead_letter_topic == topology.deadletter_topic
    assert policy.max_delivery_attempts == 5


def test_message_nacked_max_attempts_times_lands_in_dead_letter_tap(
    pubsub_emulator: PubSubEmulator, clients: PubSubClients, unique_name: str
) -> None:
    topology = pubsub_emulator.create_topology(
        input_topic=f"{unique_name}.in",
        subscription=f"{unique_name}.in-worker",
        deadletter_topic=f"{unique_name}.dlq",
        max_delivery_attempts=5,
    )
    clients.publisher.publish(topology.input_topic, b"poison").result(10)

    attempts = []
    for _ in range(5):
        [message] = pull_until(clients.subscriber, topology.input_subscription)
        attempts.append(message.delivery_attempt)
        clients.subscriber.modify_ack_deadline(
            subscription=topology.input_subscription,
            ack_ids=[message.ack_id],
            ack_deadline_seconds=0,
        )

    # The emulator moves the message only when the source subscription is pulled once more.
    # That pull finds nothing and waits out the emulator's long poll (its timeout less about
    # a second), so a short timeout keeps the round short.
    dead: list[ReceivedMessage] = []
    deadline = time.monotonic() + 30.0
    while not dead and time.monotonic() < deadline:
        again = clients.subscriber.pull(
            subscription=topology.input_subscription, max_messages=1, timeout=2.0
        )
        assert not again.received_messages
        dead = list(
            clients.subscriber.pull(
                subscription=topology.deadletter_subscription, max_messages=1, timeout=10.0
            ).received_messages
        )
    assert [m.message.data for m in dead] == [b"poison"]
    attributes = dead[0].message.attributes
    assert attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert attempts == [1, 2, 3, 4, 5]


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    emulator = PubSubEmulator(tmp_path).start()
    pgid = emulator.pgid
    assert pgid is not None
    assert len(group_members(pgid)) >= 2, "expected the gcloud wrapper and its Java child"

    emulator.stop()
    emulator.stop()

    assert not any(running(pid) for pid in group_members(pgid))


def test_an_emulator_a_killed_run_left_behind_is_stopped_by_the_next_start(
    tmp_path: Path,
) -> None:
    """A run killed with SIGKILL (``llm-bot dev``, a bench) cannot stop its emulator, whose Java
    process then held its memory and port for good; the next start on the directory ends it,
    but never a live run's emulator, nor a group that is not an emulator of the directory."""
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    left = PubSubEmulator(tmp_path).start()
    try:
        pgid = left.pgid
        assert pgid is not None
        dead = subprocess.Popen(["true"])  # the run that started it, ended without stopping it
        dead.wait()
        next(tmp_path.glob("emulator-*.pgid")).write_text(f"{pgid} {dead.pid}")
        (tmp_path / "emulator-1.pgid").write_text(f"{stranger.pid} {dead.pid}")
        with PubSubEmulator(tmp_path) as live:
            assert not any(running(pid) for pid in group_members(pgid))
            assert running(stranger.pid)
            with PubSubEmulator(tmp_path):  # a second run on the directory beside a live one
                assert live.pgid is not None
                assert group_running(live.pgid)
    finally:
        stranger.kill()
        stranger.wait()
        left.stop()


def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    with pytest.raises(EmulatorError, match="exited"):
        PubSubEmulator(tmp_path, gcloud="false").start()


def test_fresh_database_has_working_pgvector(fresh_database_url: str) -> None:
    with psycopg.connect(fresh_database_url) as conn:
        extensions = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
        assert "vector" in extensions
        row = conn.execute("SELECT '[1,2,3]'::vector <=> '[1,2,4]'::vector").fetchone()
        assert row is not None
        assert 0.0 < row[0] < 0.01

        conn.execute("CREATE TABLE items (id int PRIMARY KEY, embedding vector(3))")
        conn.execute("INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]')")
        nearest = conn.execute(
            "SELECT id FROM items ORDER BY embedding <=> '[0.9,0.1,0]' LIMIT 1"
        ).fetchone()
        assert nearest == (1,)


def test_fresh_databases_are_isolated(
    embedded_postgres: EmbeddedPostgres, fresh_database_url: str, unique_name: str
) -> None:
    other_name = f"{unique_name}-b"
    other_url = embedded_postgres.create_database(other_name)
    try:
        with psycopg.connect(fresh_database_url) as conn:
            conn.execute("CREATE TABLE marker (id int)")
        with psycopg.connect(other_url) as conn:
            row = conn.execute("SELECT to_regclass('marker')").fetchone()
            assert row == (None,)
    finally:
        embedded_postgres.drop_database(other_name)


def test_schema_url_puts_schema_first_and_keeps_vector(
    embedded_postgres: EmbeddedPostgres, unique_name: str
) -> None:
    url = embedded_postgres.create_schema(unique_name)
    try:
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE notes (id int, embedding vector(2))")
            row = conn.execute(
                "SELECT table_schema FROM information_schema.tables WHERE table_name = 'notes'"
            ).fetchone()
            assert row == (unique_name,)
    finally:
        embedded_postgres.drop_schema(unique_name)


def test_stop_ends_postgres_and_the_same_dir_starts_again(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    with EmbeddedPostgres(data_dir) as first:
        first_pid = first.postmaster_pid
        # A crashed process's handle must not keep the server alive.
        crashed = subprocess.Popen(["true"])
        crashed.wait()
        handles = data_dir / ".handle_pids.json"
        handles.write_text(json.dumps([*json.loads(handles.read_text()), crashed.pid]))
        with psycopg.connect(first.url) as conn:
            conn.execute("CREATE TABLE kept (id int)")
    assert not running(first_pid)

    with EmbeddedPostgres(data_dir) as second, psycopg.connect(second.url) as conn:
        assert conn.execute("SELECT to_regclass('kept')").fetchone() == ("kept",)
        second_pid = second.postmaster_pid
    assert not running(second_pid)
