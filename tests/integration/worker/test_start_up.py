"""`llm-bot run` starting as a platform starts it: several instances at the same instant on a
database nobody migrated (Cloud Run's first deploy), and a stop that arrives mid-start."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llm_bot.cli import main
from llm_bot_tools.devstack.worker_harness import (
    Bus,
    WorkerProcess,
    readyz,
    wait_until,
    worker_counts,
)
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ..conftest import BusFactory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]

WORKERS = 4
BACKLOG = 40


@pytest.mark.parametrize("migrated", [False, True], ids=["fresh-database", "migrated-database"])
async def test_workers_started_at_one_instant_all_become_ready_and_share_a_backlog(
    make_bus: BusFactory,
    fresh_database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model_server: LocalModelServer,
    migrated: bool,
) -> None:
    model_server.latency_ms = 300  # one worker alone would take 3 s over the backlog
    bus = make_bus(fresh_database_url, {"LLM_BOT_MAX_IN_FLIGHT": "4"})
    if migrated:
        for name, value in bus.environment.items():
            monkeypatch.setenv(name, value)
        assert await asyncio.to_thread(main, ["migrate"]) == 0
    events = [
        prompt_event(
            f"backlog {i}", user=f"u{i % 5}", thread=f"t{i % 5}", egress_topic=bus.egress_topic
        )
        for i in range(BACKLOG)
    ]
    for event in events[: BACKLOG // 2]:  # waiting before any worker runs
        bus.publish_event(event)
    workers = [
        WorkerProcess(bus.worker_environment(), tmp_path / f"w{i}.log") for i in range(WORKERS)
    ]
    began = time.monotonic()
    for worker in workers:
        worker.launch()
    try:
        await asyncio.gather(*(asyncio.to_thread(w.wait_ready, 60) for w in workers))
        ready_s = time.monotonic() - began
        # The emulator hands a waiting backlog to the first stream that opens (it ignores the
        # streams' flow control, which real Pub/Sub honours); what arrives next is shared.
        for event in events[BACKLOG // 2 :]:
            bus.publish_event(event)
        received = await bus.tap(bus.egress_topic).take(BACKLOG, timeout_s=60)
        shares = [worker_counts(w.port).get("received", 0) for w in workers]
    finally:
        for worker in workers:
            worker.signal(signal.SIGTERM)
        codes = [worker.wait(30) for worker in workers]
    ids = Counter(json.loads(m.data)["correlationId"] for m in received)
    assert ids == Counter(e.correlation_id for e in events), "each event answered once"
    assert codes == [0] * WORKERS
    print(f"\n{WORKERS} workers ready {ready_s:.1f} s after launch; events received: {shares}")
    assert sum(1 for share in shares if share) >= 2, "the backlog is processed together"


async def test_sigterm_during_start_up_exits_0_promptly(bus: Bus, tmp_path: Path) -> None:
    """However far the start got: while Python imports, or while the worker connects."""
    for delay_s in (0.3, 1.0, 2.0):
        worker = WorkerProcess(bus.worker_environment(), tmp_path / f"w{delay_s}.log").launch()
        await asyncio.sleep(delay_s)  # where in its start the signal lands, not a synchronisation
        worker.signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = await asyncio.to_thread(worker.wait, 10)
        assert code == 0, f"exit {code} after SIGTERM at {delay_s} s; log:\n{worker.log_tail()}"
        print(f"\nSIGTERM at {delay_s} s: exit 0 after {time.monotonic() - stopped:.2f} s")


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """host:port of a listener whose connections the kernel accepts and nobody answers: a
    Pub/Sub endpoint behind a network that drops its replies."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


async def test_a_start_stuck_in_a_blocking_call_still_ends_promptly_after_sigterm(
    bus: Bus, silent_endpoint: str, tmp_path: Path
) -> None:
    """The subscription check waits up to 10 s on an endpoint that never answers, in a thread
    nothing can interrupt; a stop then must not wait for it."""
    environment = bus.worker_environment(PUBSUB_EMULATOR_HOST=silent_endpoint)
    worker = WorkerProcess(environment, tmp_path / "worker.log").launch()
    try:
        # The health listener answers "not ready" once the start reached the subscription check.
        await wait_until(lambda: readyz(worker.port) == 503, 30, "the health listener")
        worker.signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = await asyncio.to_thread(worker.wait, 8)
    finally:
        worker.kill()
    log = worker.log_tail(20_000)
    assert code == 0, log
    assert "not done after" in log, log
    assert "get_subscription" in log, "the log names the call that held the start"
    print(f"\nstuck start: exit 0 after {time.monotonic() - stopped:.2f} s")


@pytest.mark.parametrize("required", [False, True], ids=["warned", "refused"])
async def test_a_subscription_without_a_dead_letter_policy_is_reported_at_start(
    make_bus: BusFactory, fresh_database_url: str, tmp_path: Path, required: bool
) -> None:
    setting = {"LLM_BOT_REQUIRE_DEAD_LETTER_POLICY": str(required).lower()}
    bus = make_bus(fresh_database_url, setting, max_delivery_attempts=None)
    worker = WorkerProcess(bus.worker_environment(), tmp_path / "worker.log")
    if required:
        code = await asyncio.to_thread(worker.launch().wait, 30)
        assert code != 0
    else:
        await asyncio.to_thread(worker.start, 30)
        worker.signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 30) == 0
    assert "has no dead-letter policy" in worker.log_tail()


async def test_a_dead_letter_topic_other_than_the_policys_is_reported_at_start(
    make_bus: BusFactory, fresh_database_url: str, tmp_path: Path
) -> None:
    """A typo in LLM_BOT_DEADLETTER_TOPIC names no topic: every reason the worker writes would
    be lost, the message reaching the policy's topic without it."""
    bus = make_bus(fresh_database_url, {})
    environment = bus.worker_environment(LLM_BOT_DEADLETTER_TOPIC="internal.deadletter.v2")
    worker = WorkerProcess(environment, tmp_path / "worker.log")
    await asyncio.to_thread(worker.start, 30)
    worker.signal(signal.SIGTERM)
    assert await asyncio.to_thread(worker.wait, 30) == 0
    log = worker.log_tail()
    assert "but llm-bot writes each reason to" in log, log
    assert "internal.deadletter.v2 (LLM_BOT_DEADLETTER_TOPIC)" in log, log


def manifest_embedding_env() -> dict[str, str]:
    """The embedding settings the Cloud Run manifests start the worker with."""
    manifest = yaml.safe_load((ROOT / "deploy" / "cloudrun-worker-pool.yaml").read_text())
    env = manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    return {
        entry["name"]: str(entry["value"])
        for entry in env
        if entry["name"].startswith("MEMORY_EMBEDDING_")
    }


async def test_a_worker_deployed_as_the_manifests_say_starts_while_embeddings_fail(
    make_bus: BusFactory, fresh_database_url: str, tmp_path: Path, model_server: LocalModelServer
) -> None:
    """A wrong key or an outage of the embeddings endpoint must not fail every instance's
    start: with the vector size in the manifests the start does not ask the endpoint for it,
    and the worker becomes ready. Events then degrade to no memories, not to failures."""
    bus = make_bus(fresh_database_url, manifest_embedding_env())
    model_server.fail_next(1000, status=401, kind="embeddings")
    worker = WorkerProcess(bus.worker_environment(), tmp_path / "worker.log")
    await asyncio.to_thread(worker.start, 30)
    try:
        embedding_calls = [r for r in model_server.requests if r.path.endswith("/embeddings")]
        assert embedding_calls == []
    finally:
        worker.signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 30) == 0
