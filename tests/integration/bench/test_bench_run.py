"""``llm-bot bench run`` on the local stack, small: it completes and its figures are sane.

Only sanity is checked (positive rates, one model call per event with the echo model, the
worker's counts adding up): the numbers themselves are reported in docs/performance.md, never
asserted, since they depend on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llm_bot_tools.local.processes import descendants, running

pytestmark = pytest.mark.integration


def test_bench_run_reports_sane_numbers(tmp_path: Path) -> None:
    plot = tmp_path / "bench.png"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_bot.cli",
            "bench",
            "run",
            "--events",
            "40",
            "--in-flight",
            "8",
            "--workers",
            "2",
            "--data-dir",
            str(tmp_path / "bench"),
            "--plot",
            str(plot),
            "--profile",
            str(tmp_path / "profile"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "events/s" in done.stderr  # progress lines
    [report] = json.loads(done.stdout)
    assert report["in_flight"] == 8
    assert report["workers"] == 2
    assert report["events"] == 40
    for side in ("service", "raw"):
        figures = report[side]
        assert figures["events_per_s"] > 0
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"]
    assert report["ratio"] > 0
    assert report["model_calls_per_event"] == 1.0
    assert 0 < report["write_transactions_per_event"] < 10
    assert report["worker_peak_rss_mb"] > 0
    assert report["worker_cpu_ms_per_event"] > 0
    assert report["worker_ready_s"] > 0
    # The echo model answers at once: beyond the model is the whole latency.
    assert report["beyond_model_p50_ms"] == report["service"]["p50_ms"]
    total = report["events"] + report["latency_events"]
    assert report["worker_counts"]["acked"] == total  # summed over both workers
    assert plot.stat().st_size > 0
    # The workers' loop threads sampled by py-spy, by stage, and their other threads' CPU.
    stages = {s["stage"]: s for s in report["cpu_by_stage"]}
    assert "other threads (Pub/Sub client, gRPC, pools)" in stages
    assert len(stages) > 1
    assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0)
    assert all(s["cpu_ms"] >= 0 for s in stages.values())
    assert len(list((tmp_path / "profile").glob("*.txt"))) == 2
    assert (tmp_path / "profile" / "stages.png").stat().st_size > 0


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:  # ended meanwhile
        return ""


def processes_started_by(pid: int, path: Path) -> set[int]:
    """``pid``'s descendants, and the servers that left its tree as daemons do (Postgres) but
    name ``path`` on their command line."""
    named = {
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and str(path) in command_line(int(entry.name))
    }
    return descendants(pid) | named


def test_a_bench_stopped_by_sigterm_stops_every_server_it_started(tmp_path: Path) -> None:
    """SIGTERM (a CI job's timeout, a terminal closed) is Ctrl-C to a bench: the emulator,
    Postgres and the worker it started stop with it, and it exits 130."""
    command = [sys.executable, "-m", "llm_bot.cli", "bench", "run", "--events", "3000"]
    bench = subprocess.Popen(
        [*command, "--data-dir", str(tmp_path / "bench"), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started: set[int] = set()
    try:
        assert bench.stderr is not None
        for line in bench.stderr:  # the service's progress: every server is up
            if "service backlog" in line:
                break
        started = processes_started_by(bench.pid, tmp_path)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 130
        assert len(started) >= 3, started  # the emulator, Postgres, the worker, at least
        assert not {pid: command_line(pid) for pid in started if running(pid)}
    except BaseException:
        for pid in [bench.pid, *started]:  # what the failure left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
