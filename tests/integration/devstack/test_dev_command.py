"""`llm-bot dev --services-only` as a user runs it: exports, real clients, a clean exit, no
library warning; a crash of its Postgres reported at once; a CPU its pgvector cannot run on
refused before anything starts; Ctrl-C while the stack starts stops it there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import psycopg
import pytest

from llm_bot_tools.local.postgres_build import CPUINFO_ENV, PGVECTOR
from llm_bot_tools.local.pubsub_emulator import free_loopback_port, pubsub_clients

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 120


class RunningDev:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.exports: dict[str, str] = {}
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_errors, daemon=True).start()

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        self.errors.extend(line.rstrip("\n") for line in self.process.stderr)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").rstrip("\n").partition("=")
                self.exports[name] = value.strip("'")
            if "local stack ready" in line:
                self.ready.set()
        self.ready.set()  # the process ended: wake the waiter either way


def dev_command(data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llm_bot.cli",
        "dev",
        "--services-only",
        "--data-dir",
        str(data_dir),
    ]


def clean_environment() -> dict[str, str]:
    """As on a newcomer's shell: no service configured, no XDG_RUNTIME_DIR (containers, sudo)."""
    unset = ("OPENAI_", "PUBSUB_", "DATABASE_", "XDG_RUNTIME_DIR")
    return {k: v for k, v in os.environ.items() if not k.startswith(unset)}


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[RunningDev]:
    process = subprocess.Popen(
        dev_command(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_environment(),
    )
    running = RunningDev(process)
    yield running
    if process.poll() is None:
        process.kill()
        process.wait()


def test_dev_prints_exports_serves_real_clients_and_stops_cleanly(dev: RunningDev) -> None:
    assert dev.ready.wait(START_TIMEOUT_S), "dev stack did not come up"
    assert dev.process.poll() is None, "\n".join(dev.lines)
    exports = dev.exports
    for name in (
        "PUBSUB_EMULATOR_HOST",
        "GOOGLE_CLOUD_PROJECT",
        "DATABASE_URL",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "LLM_BOT_INPUT_TOPIC",
        "LLM_BOT_SUBSCRIPTION",
        "LLM_BOT_DEADLETTER_TOPIC",
    ):
        assert name in exports, name

    clients = pubsub_clients(exports["PUBSUB_EMULATOR_HOST"])
    project = exports["GOOGLE_CLOUD_PROJECT"]
    try:
        topic = clients.publisher.topic_path(project, exports["LLM_BOT_INPUT_TOPIC"])
        clients.publisher.publish(topic, b"ping", origin="test").result(timeout=30)
        subscription = clients.subscriber.subscription_path(
            project, exports["LLM_BOT_SUBSCRIPTION"]
        )
        pulled = clients.subscriber.pull(subscription=subscription, max_messages=1, timeout=30)
        assert [
            (m.message.data, m.message.attributes["origin"]) for m in pulled.received_messages
        ] == [(b"ping", "test")]
    finally:
        clients.close()

    with psycopg.connect(exports["DATABASE_URL"]) as connection:
        extensions = {row[0] for row in connection.execute("SELECT extname FROM pg_extension")}
        migrated = connection.execute("SELECT count(*) FROM schema_migrations").fetchone()
    assert "vector" in extensions
    assert migrated is not None
    assert migrated[0] >= 1

    model = openai.OpenAI(base_url=exports["OPENAI_BASE_URL"], api_key=exports["OPENAI_API_KEY"])
    reply = model.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.choices[0].message.content == "echo: hello"

    dev.process.send_signal(signal.SIGTERM)
    assert dev.process.wait(timeout=60) == 0
    assert_nothing_left(exports)
    assert [line for line in dev.errors if "Warning" in line] == []


def test_a_closed_terminal_stops_the_stack_as_ctrl_c_does(dev: RunningDev) -> None:
    """SIGHUP, what closing the terminal of `make run` sends, leaves no server behind."""
    assert dev.ready.wait(START_TIMEOUT_S), "dev stack did not come up"
    assert dev.process.poll() is None, "\n".join(dev.lines)
    dev.process.send_signal(signal.SIGHUP)
    assert dev.process.wait(timeout=60) == 0
    assert_nothing_left(dev.exports)


def test_ctrl_c_while_the_stack_starts_stops_what_started_and_exits_130(tmp_path: Path) -> None:
    """The whole `llm-bot dev` (not --services-only) interrupted once its Postgres is up: the
    start unwinds, rather than the signal being set aside, the worker started and the stack
    served on."""
    command = [part for part in dev_command(tmp_path) if part != "--services-only"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_environment() | {"PORT": str(free_loopback_port())},
    )
    postgres_up = threading.Event()

    def read_errors() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            if "embedded postgres ready" in line:
                postgres_up.set()

    threading.Thread(target=read_errors, daemon=True).start()
    try:
        assert postgres_up.wait(START_TIMEOUT_S), "the stack's Postgres did not start"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert leftovers.stdout == "", "processes of the stack left behind"


def assert_nothing_left(exports: dict[str, str]) -> None:
    host, port = exports["PUBSUB_EMULATOR_HOST"].split(":")
    leftovers = subprocess.run(
        ["pgrep", "-f", f"host-port={host}:{port}"], capture_output=True, check=False
    )
    assert leftovers.stdout == b"", "emulator processes left behind"
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(exports["DATABASE_URL"], connect_timeout=2).close()


def test_a_crash_of_its_postgres_is_reported_at_once_and_ends_the_stack(dev: RunningDev) -> None:
    assert dev.ready.wait(START_TIMEOUT_S), "dev stack did not come up"
    victim = psycopg.connect(dev.exports["DATABASE_URL"], autocommit=True)
    row = victim.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    os.kill(row[0], signal.SIGKILL)  # as SIGILL would: the postmaster restarts
    assert dev.process.wait(timeout=30) == 1
    victim.close()
    crash = [line for line in dev.errors if line.startswith("llm-bot: the local Postgres crashed")]
    assert len(crash) == 1, dev.errors
    assert f"(PID {row[0]}) was terminated by signal 9" in crash[0]
    assert_nothing_left(dev.exports)


def test_a_cpu_the_wheels_pgvector_cannot_run_on_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    """No pgvector source beside the clone, an AMD EPYC's flags (AVX2, no AVX-512)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu sse4_2 avx avx2 f16c fma bmi1 bmi2 abm movbe\n")
    env = clean_environment() | {
        PGVECTOR.source_env: str(tmp_path / "absent.tar.gz"),
        CPUINFO_ENV: str(cpuinfo),
    }
    result = subprocess.run(
        dev_command(tmp_path / "data"),
        capture_output=True,
        text=True,
        env=env,
        timeout=START_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("llm-bot: error: this CPU lacks avx512f")
    assert PGVECTOR.source_env in result.stderr
    assert not (tmp_path / "data").exists(), "no service was started"
