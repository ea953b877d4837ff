"""Drive the worker the way the platform does, for tests and ``llm-bot dev``: in this process
or as a ``llm-bot run`` child, and read what it published through tap subscriptions.

Everything waits on a condition with a deadline (a message arrived, ``/readyz`` answered, a
count was reached), never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from google.api_core.exceptions import DeadlineExceeded
from google.cloud import pubsub_v1
from google.pubsub_v1.types import PubsubMessage
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from llm_bot.events.codec import encode
from llm_bot.events.models import InternalEventV2
from llm_bot.settings import Settings
from llm_bot.telemetry.metrics import WORKER_COUNTS
from llm_bot.transport.clients import publisher_client, subscriber_client
from llm_bot.worker import Worker
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.pubsub_emulator import (
    PubSubClients,
    PubSubEmulator,
    free_loopback_port,
)

# The emulator answers a pull that finds nothing about a second before its deadline, and one
# that finds messages at once: so an empty pull costs about half a second.
_PULL_TIMEOUT_S = 1.5
_POLL_S = 0.05


class Tap:
    """What reached a topic, read through its tap subscription and acked as it is read."""

    def __init__(self, subscriber: pubsub_v1.SubscriberClient, subscription_path: str) -> None:
        self._subscriber = subscriber
        self.subscription_path = subscription_path
        self.received: list[PubsubMessage] = []

    async def take(self, count: int, timeout_s: float = 30.0) -> list[PubsubMessage]:
        """Pull until ``count`` more messages came; returns them, or raises
        :class:`TimeoutError` when the deadline passed first."""
        wanted = len(self.received) + count
        deadline = time.monotonic() + timeout_s
        while len(self.received) < wanted and time.monotonic() < deadline:
            await self._pull_once(wanted - len(self.received))
        fresh = self.received[wanted - count :]
        if len(self.received) < wanted:
            raise TimeoutError(
                f"{self.subscription_path}: got {len(fresh)} of {count} within {timeout_s}s"
            )
        return fresh

    async def drain(self, quiet_pulls: int = 2) -> list[PubsubMessage]:
        """Everything still there: pulls until ``quiet_pulls`` pulls in a row bring nothing.

        Call it once the producer is known to be done (its messages were acked after
        publishing), so anything published is already in the subscription.
        """
        before, quiet = len(self.received), 0
        while quiet < quiet_pulls:
            quiet = 0 if await self._pull_once(100) else quiet + 1
        return self.received[before:]

    async def _pull_once(self, max_messages: int) -> int:
        try:
            response = await asyncio.to_thread(
                self._subscriber.pull,
                subscription=self.subscription_path,
                max_messages=max_messages,
                timeout=_PULL_TIMEOUT_S,
            )
        except DeadlineExceeded:
            return 0
        if response.received_messages:
            await asyncio.to_thread(
                self._subscriber.acknowledge,
                subscription=self.subscription_path,
                ack_ids=[m.ack_id for m in response.received_messages],
            )
        self.received.extend(m.message for m in response.received_messages)
        return len(response.received_messages)


class Bus:
    """One worker's world on an emulator: unique topics named after ``prefix``, taps on the
    next-step, egress and dead-letter topics, and the worker's settings as variables."""

    def __init__(
        self,
        emulator: PubSubEmulator,
        prefix: str,
        environment: Mapping[str, str],
        **topology_options: Any,
    ) -> None:
        self.prefix = prefix
        self.next_topic = f"{prefix}-next"
        self.egress_topic = f"{prefix}-egress"
        self.topology = emulator.create_topology(
            input_topic=f"{prefix}-in",
            subscription=f"{prefix}-sub",
            deadletter_topic=f"{prefix}-dlq",
            output_topics=[self.next_topic, self.egress_topic],
            **topology_options,
        )
        # Consolidation's jobs go to a topic of their own, worked off its own subscription.
        self.consolidation_topology = emulator.create_topology(
            input_topic=f"{prefix}-consolidate",
            subscription=f"{prefix}-consolidate-sub",
            deadletter_topic=f"{prefix}-dlq",
            **topology_options,
        )
        # Ordering on, so a test may publish with ordering keys as an upstream service would.
        self.clients = PubSubClients(
            publisher_client(emulator.host, ordering=True), subscriber_client(emulator.host)
        )
        self.environment = {
            **emulator.env(),
            "LLM_BOT_INPUT_TOPIC": f"{prefix}-in",
            "LLM_BOT_SUBSCRIPTION": f"{prefix}-sub",
            "LLM_BOT_DEADLETTER_TOPIC": f"{prefix}-dlq",
            "LLM_BOT_CONSOLIDATION_TOPIC": f"{prefix}-consolidate",
            "LLM_BOT_CONSOLIDATION_SUBSCRIPTION": f"{prefix}-consolidate-sub",
            **environment,
        }

    def settings(self, **overrides: str) -> Settings:
        """Settings of one worker; each gets its own health port."""
        values = {"PORT": str(free_loopback_port()), **self.environment, **overrides}
        return Settings(**values)  # type: ignore[arg-type]

    def worker_environment(self, **overrides: str) -> dict[str, str]:
        return {"PORT": str(free_loopback_port()), **self.environment, **overrides}

    def tap(self, topic: str) -> Tap:
        return Tap(self.clients.subscriber, self.topology.output_subscriptions[topic])

    def deadletter_tap(self) -> Tap:
        return Tap(self.clients.subscriber, self.topology.deadletter_subscription)

    def publish_event(self, event: InternalEventV2, ordering_key: str = "") -> None:
        data, attributes = encode(event)
        self.publish(data, attributes, ordering_key)

    def publish(self, data: bytes, attributes: Mapping[str, str], ordering_key: str = "") -> str:
        """Publish to the input topic; the message id, which a dead letter names."""
        future = self.clients.publisher.publish(
            self.topology.input_topic, data, ordering_key=ordering_key, **attributes
        )
        message_id: str = future.result(timeout=30)
        return message_id

    def publish_job(self, data: bytes) -> str:
        """Publish to the consolidation topic, as the sweep does (a copy of a job, say)."""
        future = self.clients.publisher.publish(self.consolidation_topology.input_topic, data)
        message_id: str = future.result(timeout=30)
        return message_id

    def close(self) -> None:
        self.clients.close()


def model_environment(model: LocalModelServer) -> dict[str, str]:
    """Point a worker at the local model server, with short timeouts so faults resolve fast."""
    return {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "local-test-key",
        "OPENAI_TIMEOUT_MS": "2000",
        "LLM_BOT_MODEL_DEADLINE_MS": "3000",
    }


async def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(_POLL_S)


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings, metrics_registry: CollectorRegistry | None = None
) -> AsyncIterator[Worker]:
    """A worker on this event loop, serving until the block ends, then drained and closed."""
    stop = asyncio.Event()
    async with Worker(settings, metrics_registry=metrics_registry) as worker:
        serving = asyncio.create_task(worker.serve(stop))
        try:
            yield worker
        finally:
            stop.set()
            await serving


def readyz(port: int) -> int | None:
    """Status of the worker's ``/readyz`` on ``port``, or None when nothing answers."""
    return health_status(port, "/readyz")


def health_status(port: int, path: str, timeout_s: float = 2.0) -> int | None:
    """Status of the worker's health route ``path`` on ``port``, or None when nothing answers
    within ``timeout_s``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


def metric_samples(port: int, family: str, timeout_s: float = 2.0) -> dict[str, float]:
    """The samples of one metric ``family`` on the worker's ``/metrics`` on ``port``, by their
    labels' values joined with ``,`` ("" for a sample without labels)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"/metrics on port {port} answered {response.status}")
    return {
        ",".join(sample.labels.values()): sample.value
        for found in text_string_to_metric_families(text)
        if found.name == family
        for sample in found.samples
        if not sample.name.endswith("_created")
    }


def worker_counts(port: int) -> dict[str, int]:
    """What the worker on ``port`` did so far (received, acked, transactions, ...), from its
    ``/metrics``, as Prometheus reads it."""
    return {name: int(value) for name, value in metric_samples(port, WORKER_COUNTS).items()}


@dataclass(frozen=True)
class Served:
    """An ``llm-bot`` command that serves HTTP: its name, the setting naming its port, and the
    path and status that say it is ready."""

    command: str
    port_setting: str
    ready_path: str
    ready_status: int


WORKER = Served("run", "PORT", "/readyz", 200)
# The console answers 401 to a request without credentials once it serves.
CONSOLE = Served("console", "LLM_BOT_CONSOLE_PORT", "/", 401)


class WorkerProcess:
    """``llm-bot run`` (or another command that serves, ``served``) as a child process with
    ``environment`` (setting aliases -> values)."""

    def __init__(
        self, environment: Mapping[str, str], log_path: Path, served: Served = WORKER
    ) -> None:
        self._environment = dict(environment)
        self.log_path = log_path
        self.served = served
        self.port = int(environment[served.port_setting])
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[Any] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("worker process not started")
        return self._process

    def start(self, ready_timeout_s: float = 60.0) -> WorkerProcess:
        self.launch()
        self.wait_ready(ready_timeout_s)
        return self

    def launch(self) -> WorkerProcess:
        """Start the process without waiting for it: several can then start at one instant."""
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "llm_bot.cli", self.served.command],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self._environment},
        )
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        served = self.served
        while health_status(self.port, served.ready_path) != served.ready_status:
            if self.process.poll() is not None or time.monotonic() >= deadline:
                raise RuntimeError(
                    f"{served.command} did not become ready; log:\n{self.log_tail()}"
                )
            time.sleep(_POLL_S)

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout_s: float) -> int:
        code = self.process.wait(timeout=timeout_s)
        if self._log is not None:
            self._log.close()
        return code

    def kill(self) -> None:
        """SIGKILL, and reap; safe to call when the process already ended."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self.wait(30)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as error:
            return f"<log unreadable: {error}>"
