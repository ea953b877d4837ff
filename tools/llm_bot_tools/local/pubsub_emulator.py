"""Launcher for the Google Pub/Sub emulator, so tests and `llm-bot dev` run against the real API.

The emulator is a Java server behind a gcloud wrapper. It runs in its own process group so that
stopping it takes the Java child along, and it writes to a log file so a full pipe can never
stall it.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Self

from google.api_core.exceptions import AlreadyExists
from google.cloud import pubsub_v1

from llm_bot.transport.clients import publisher_client, subscriber_client
from llm_bot_tools.local.lifecycle import LocalService
from llm_bot_tools.local.processes import group_commands, group_running, running

_log = logging.getLogger(__name__)

DEFAULT_PROJECT = "llm-bot-local"
_ADMIN_TIMEOUT_S = 10.0
_LOG_TAIL_CHARS = 4000
# gcloud must neither prompt nor reach the network on start.
_GCLOUD_ENV = {
    "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
    "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
}


class EmulatorError(RuntimeError):
    """The emulator did not come up or did not go away; the message carries its log tail."""


@dataclass(frozen=True)
class PubSubClients:
    """Clients bound to one emulator by an explicit channel, independent of process env."""

    publisher: pubsub_v1.PublisherClient
    subscriber: pubsub_v1.SubscriberClient

    def close(self) -> None:
        self.publisher.stop()
        self.publisher.transport.close()
        self.subscriber.close()


def pubsub_clients(host: str) -> PubSubClients:
    """Clients bound to the emulator at `host`, whatever PUBSUB_EMULATOR_HOST says."""
    return PubSubClients(publisher=publisher_client(host), subscriber=subscriber_client(host))


@dataclass(frozen=True)
class Topology:
    """Full resource paths of what `create_topology` made, so callers never rebuild names."""

    input_topic: str
    input_subscription: str
    deadletter_topic: str
    deadletter_subscription: str
    # Both keyed by the output topic's short name: its topic path, and its tap subscription path.
    output_topics: Mapping[str, str] = field(default_factory=dict)
    output_subscriptions: Mapping[str, str] = field(default_factory=dict)


def tap_subscription_name(topic: str) -> str:
    """Name of the pull subscription that lets tests and the CLI read what reached `topic`."""
    return f"{topic}-tap"


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ended(pgid: int) -> bool:
    return not group_running(pgid)


def _wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


class PubSubEmulator(LocalService):
    """One emulator process group on a free loopback port, with its state in `work_dir`."""

    def __init__(
        self,
        work_dir: Path,
        *,
        project: str = DEFAULT_PROJECT,
        port: int | None = None,
        start_timeout_s: float = 60.0,
        gcloud: str = "gcloud",
    ) -> None:
        self._work_dir = work_dir
        self._project = project
        self._port = port
        self._start_timeout_s = start_timeout_s
        self._gcloud = gcloud
        self._process: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    @property
    def host(self) -> str:
        if self._port is None:
            raise EmulatorError("emulator not started")
        return f"127.0.0.1:{self._port}"

    @property
    def project(self) -> str:
        return self._project

    @property
    def pgid(self) -> int | None:
        """Process group id; equal to the wrapper's pid because it leads its own session."""
        return None if self._process is None else self._process.pid

    @property
    def _group_file(self) -> Path:
        """The running group's id and the id of the process that started it, kept while it
        runs: a run killed with SIGKILL cannot stop its emulator, and the next start on this
        directory does (:meth:`_stop_left_behind`)."""
        return self._work_dir / f"emulator-{self._port}.pgid"

    @property
    def log_path(self) -> Path:
        return self._work_dir / f"pubsub-emulator-{self._port}.log"

    def env(self) -> dict[str, str]:
        """Variables that point a child process (the worker, the CLI) at this emulator."""
        return {"PUBSUB_EMULATOR_HOST": self.host, "GOOGLE_CLOUD_PROJECT": self._project}

    def clients(self) -> PubSubClients:
        return pubsub_clients(self.host)

    def start(self) -> Self:
        if self._process is not None:
            return self
        if self._port is None:
            self._port = free_loopback_port()
        self._work_dir.mkdir(parents=True, exist_ok=True)
        self._stop_left_behind()
        data_dir = self._work_dir / f"pubsub-data-{self._port}"
        data_dir.mkdir(exist_ok=True)  # gcloud writes env.yaml there and will not create it
        command = [self._gcloud, "beta", "emulators", "pubsub", "start", f"--host-port={self.host}"]
        command += [f"--project={self._project}", f"--data-dir={data_dir}"]
        began = time.monotonic()
        with self.log_path.open("ab") as log_file:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **_GCLOUD_ENV},
            )
        self._group_file.write_text(f"{self._process.pid} {os.getpid()}")
        _log.info("pubsub emulator starting on %s (pgid %s)", self.host, self._process.pid)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        _log.info("pubsub emulator ready on %s in %.1fs", self.host, self.startup_seconds)
        return self

    def _wait_until_ready(self) -> None:
        process = self._process
        if process is None:
            raise EmulatorError("the emulator was not started")
        answered = _wait_until(
            lambda: process.poll() is not None or self._answers(), self._start_timeout_s
        )
        if process.poll() is not None:
            problem = f"exited with {process.returncode} before answering"
        elif not answered:
            problem = f"did not answer within {self._start_timeout_s:.0f}s"
        else:
            return
        raise EmulatorError(
            f"pubsub emulator on {self.host} {problem}; log {self.log_path}:\n{self._log_tail()}"
        )

    def _answers(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=1.0)
        try:
            connection.request("GET", "/")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError as error:
            return f"<log unreadable: {error}>"

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the whole group (the gcloud wrapper exits on SIGTERM without taking Java along)
        with SIGKILL: the emulator keeps its topics and messages in memory only, so a clean
        shutdown saves nothing, and Java spends about two seconds in one."""
        process, self._process = self._process, None
        if process is None:
            return
        pgid = process.pid

        def group_gone() -> bool:
            # poll() reaps the wrapper; an unreaped zombie would keep the group alive.
            return process.poll() is not None and not group_running(pgid)

        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
            _wait_until(group_gone, timeout_s, 0.05)
        process.poll()
        if group_running(pgid):
            raise EmulatorError(f"pubsub emulator group {pgid} survived SIGKILL")
        self._group_file.unlink(missing_ok=True)
        _log.info("pubsub emulator on %s stopped", self.host)

    def _stop_left_behind(self) -> None:
        """End each emulator a run on this directory left running when it was killed outside
        its stop (SIGKILL, a crash): its Java process holds hundreds of MB and a port until the
        machine restarts. One whose run still lives is that run's; and only a group one of whose
        processes names this directory is ended, since a group id left in a file may since
        belong to anything else."""
        for path in self._work_dir.glob("emulator-*.pgid"):
            try:
                pgid, owner = map(int, path.read_text().split())
            except (OSError, ValueError):
                continue
            if running(owner):
                continue
            if any(str(self._work_dir) in command for command in group_commands(pgid)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                if not _wait_until(partial(_ended, pgid), 5.0, 0.05):
                    raise EmulatorError(f"the emulator group {pgid} left behind survived SIGKILL")
                _log.info("stopped the pubsub emulator a killed run left behind (pgid %s)", pgid)
            path.unlink(missing_ok=True)

    def create_topology(
        self,
        *,
        input_topic: str,
        subscription: str,
        deadletter_topic: str,
        output_topics: Iterable[str] = (),
        max_delivery_attempts: int | None = 5,
        ack_deadline_seconds: int = 30,
        message_ordering: bool = False,
    ) -> Topology:
        """Create the worker's topics and subscriptions if absent (existing ones are kept as-is).

        Each output topic and the dead-letter topic get a tap subscription, because a message
        published to a topic with no subscription is dropped and tests need to read it.
        ``message_ordering`` turns on ordered delivery (by ordering key) on every subscription.
        ``max_delivery_attempts=None`` leaves the input subscription without a dead-letter policy.
        """
        topic_of = partial(pubsub_v1.PublisherClient.topic_path, self._project)
        subscription_of = partial(pubsub_v1.SubscriberClient.subscription_path, self._project)
        outputs = list(output_topics)
        topology = Topology(
            input_topic=topic_of(input_topic),
            input_subscription=subscription_of(subscription),
            deadletter_topic=topic_of(deadletter_topic),
            deadletter_subscription=subscription_of(tap_subscription_name(deadletter_topic)),
            output_topics={name: topic_of(name) for name in outputs},
            output_subscriptions={
                name: subscription_of(tap_subscription_name(name)) for name in outputs
            },
        )
        taps = {topology.deadletter_subscription: topology.deadletter_topic}
        taps.update({topology.output_subscriptions[name]: topic_of(name) for name in outputs})
        clients = self.clients()
        try:
            for path in (topology.input_topic, *taps.values()):  # taps cover DLQ + outputs
                _unless_exists(clients.publisher.create_topic, name=path)
            _unless_exists(
                clients.subscriber.create_subscription,
                name=topology.input_subscription,
                topic=topology.input_topic,
                ack_deadline_seconds=ack_deadline_seconds,
                enable_message_ordering=message_ordering,
                dead_letter_policy=None
                if max_delivery_attempts is None
                else {
                    "dead_letter_topic": topology.deadletter_topic,
                    "max_delivery_attempts": max_delivery_attempts,
                },
            )
            for subscription_path, topic_path in taps.items():
                _unless_exists(
                    clients.subscriber.create_subscription,
                    name=subscription_path,
                    topic=topic_path,
                    ack_deadline_seconds=ack_deadline_seconds,
                    enable_message_ordering=message_ordering,
                )
        finally:
            clients.close()
        return topology


def _unless_exists(create: Callable[..., object], **fields: Any) -> None:
    try:
        create(request=fields, timeout=_ADMIN_TIMEOUT_S)
    except AlreadyExists:
        _log.debug("%s already exists", fields["name"])
