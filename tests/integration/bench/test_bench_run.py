"""``llm-bot bench run`` on the local stack, small: it completes and its figures are sane.

Only sanity is checked (positive rates, one model call per event with the echo model, the
worker's counts adding up): the numbers themselves are reported in docs/performance.md, never
asserted, since they depend on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
