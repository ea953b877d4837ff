"""`llm-bot run` as a process: kill -9 in the middle of 200 events then a restart, and SIGTERM
with work in flight. The model server runs in this test process; the workers reach it over
OPENAI_BASE_URL, so its request record counts every model call of every worker."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import psycopg
import pytest

from llm_bot_tools.devstack.worker_harness import Bus, WorkerProcess, wait_until
from llm_bot_tools.local.openai_payloads import spoken_text
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = pytest.mark.integration

EVENTS = 200
MAX_IN_FLIGHT = 16


def model_calls_by_prompt(model_server: LocalModelServer) -> Counter[str]:
    return Counter(spoken_text(r["messages"][-1]["content"]) for r in model_server.chat_requests())


async def test_kill_9_mid_run_then_restart_every_event_comes_out_once_answered_once(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    model_server.latency_ms = 20
    environment = bus.worker_environment(
        LLM_BOT_MAX_IN_FLIGHT=str(MAX_IN_FLIGHT),
        # Claims of the killed worker expire (4 s + 5 s margin) about when Pub/Sub redelivers
        # the messages it held (leases are extended 10 s at a time), so the restart barely
        # waits on a claim.
        LLM_BOT_EVENT_DEADLINE_MS="4000",
    )
    events = [
        prompt_event(f"event {i}", user=f"u{i % 7}", thread="t", egress_topic=bus.egress_topic)
        for i in range(EVENTS)
    ]
    egress = bus.tap(bus.egress_topic)
    first = WorkerProcess(environment, tmp_path / "first.log").start()
    try:
        for event in events:
            bus.publish_event(event)
        await egress.take(EVENTS // 4, timeout_s=60)
        first.kill()
        killed_at = time.time()
        second = WorkerProcess(environment, tmp_path / "second.log").start()
        try:
            began = time.monotonic()
            seen = {json.loads(m.data)["correlationId"] for m in egress.received}
            while len(seen) < EVENTS and time.monotonic() - began < 120:
                for message in await egress.take(1, timeout_s=120 - (time.monotonic() - began)):
                    seen.add(json.loads(message.data)["correlationId"])
            print(f"\nall {EVENTS} out {time.monotonic() - began:.0f}s after the restart")
            second.signal(signal.SIGTERM)
            assert second.wait(30) == 0, second.log_tail()
        finally:
            second.kill()
    finally:
        first.kill()
    copies: dict[str, set[bytes]] = defaultdict(set)
    for message in egress.received + await egress.drain():
        copies[json.loads(message.data)["correlationId"]].add(message.data)

    assert set(copies) == {e.correlation_id for e in events}
    assert all(len(versions) == 1 for versions in copies.values()), "a copy differed"
    calls = model_calls_by_prompt(model_server)
    assert set(calls) == {f"event {i}" for i in range(EVENTS)}
    repeated = {prompt for prompt, n in calls.items() if n > 1}
    # Only a call cut off by the kill, whose answer was never committed, can be made again.
    assert len(repeated) <= MAX_IN_FLIGHT
    assert max(calls.values()) <= 2
    stamps = defaultdict(list)
    for request in model_server.requests:
        if request.body and "messages" in request.body:
            stamps[spoken_text(request.body["messages"][-1]["content"])].append(request.time)
    assert all(min(stamps[p]) < killed_at < max(stamps[p]) for p in repeated)
    with psycopg.connect(bus.environment["DATABASE_URL"]) as connection:
        row = connection.execute(
            "SELECT count(*), count(*) FILTER (WHERE output_data IS NOT NULL) FROM processed_events"
        ).fetchone()
        turns = connection.execute(
            "SELECT count(*), count(DISTINCT source_event), max(seq) FROM conversation_turns"
        ).fetchone()
    # Every output is stored. (Its "published" mark trails the ack, so the kill may have lost
    # a few: such a row only makes a later copy publish the same bytes again.)
    assert row == (EVENTS, EVENTS)
    # One history pair per event, written with its output: gap-free seq in the one thread.
    assert turns == (2 * EVENTS, EVENTS, 2 * EVENTS)
    duplicates = len(egress.received) - EVENTS
    print(f"\nkill -9: {len(repeated)} model call(s) repeated, {duplicates} re-publication(s)")


async def test_sigterm_with_work_in_flight_exits_0_within_the_grace_and_loses_nothing(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    """Work in flight finishes within the grace; the events past the in-flight limit, pushed to
    the worker all the same (the emulator ignores the stream's flow control) or still waiting,
    are not started and go to the restarted worker. In-flight work that outlives the grace is
    nacked instead: see the unit tests."""
    latency_ms, grace_s = 800, 3.0
    model_server.latency_ms = latency_ms
    environment = bus.worker_environment(
        LLM_BOT_MAX_IN_FLIGHT="4",
        LLM_BOT_SHUTDOWN_GRACE_S=str(grace_s),
        OPENAI_TIMEOUT_MS="10000",
        LLM_BOT_MODEL_DEADLINE_MS="10000",
    )
    events = [
        prompt_event(f"term {i}", user="u", thread="t", egress_topic=bus.egress_topic)
        for i in range(8)  # twice the in-flight limit
    ]
    egress = bus.tap(bus.egress_topic)
    worker = WorkerProcess(environment, tmp_path / "worker.log").start()
    try:
        for event in events:
            bus.publish_event(event)
        await wait_until(lambda: len(model_server.chat_requests()) >= 4, 30, "work in flight")
        asked_to_stop = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.wait(grace_s + 10) == 0, worker.log_tail()
        stopped_in = time.monotonic() - asked_to_stop
    finally:
        worker.kill()
    assert stopped_in < grace_s + 4, f"took {stopped_in:.1f}s"
    assert "worker stopped" in worker.log_tail()

    model_server.latency_ms = 0
    restarted = WorkerProcess(environment, tmp_path / "restarted.log").start()
    try:
        received = await egress.take(len(events))
        restarted.signal(signal.SIGTERM)
        assert restarted.wait(30) == 0
    finally:
        restarted.kill()
    ids = Counter(json.loads(m.data)["correlationId"] for m in received + await egress.drain())
    assert set(ids) == {e.correlation_id for e in events}
    with psycopg.connect(bus.environment["DATABASE_URL"]) as connection:
        marks = connection.execute(
            "SELECT count(*) FILTER (WHERE published), count(*) FROM processed_events"
        ).fetchone()
    assert marks == (len(events), len(events)), "a clean stop records every confirmed publish"
    print(f"\nSIGTERM: stopped in {stopped_in:.1f}s with grace {grace_s}s")


async def test_sighup_of_a_worker_started_in_a_terminal_drains_as_sigterm_does(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    """Closing the terminal a worker was started from (SIGHUP) hands its work back, as SIGTERM
    does, instead of ending the process where it stands: the claims it held go at once, not
    after their lease."""
    model_server.latency_ms = 5000
    environment = bus.worker_environment(
        LLM_BOT_MAX_IN_FLIGHT="2",
        LLM_BOT_SHUTDOWN_GRACE_S="1",
        OPENAI_TIMEOUT_MS="10000",
        LLM_BOT_MODEL_DEADLINE_MS="10000",
    )
    worker = WorkerProcess(environment, tmp_path / "worker.log").start()
    try:
        for i in range(2):
            bus.publish_event(
                prompt_event(f"hup {i}", user="u", thread="t", egress_topic=bus.egress_topic)
            )
        await wait_until(lambda: len(model_server.chat_requests()) >= 2, 30, "work in flight")
        worker.signal(signal.SIGHUP)
        assert worker.wait(15) == 0, worker.log_tail()
    finally:
        worker.kill()
    assert "worker stopped: 0 in-flight finished, 2 handed back" in worker.log_tail()
    with psycopg.connect(bus.environment["DATABASE_URL"]) as connection:
        held = connection.execute(
            "SELECT count(*) FILTER (WHERE claim_token IS NOT NULL), count(*) FROM processed_events"
        ).fetchone()
    assert held == (0, 2), "a claim outlived the worker"
