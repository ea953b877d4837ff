"""``llm-bot bench retrieval`` with tiny sizes: every part runs, the JSON names what was
measured, and both plots are written.

Only the shape is checked: the latencies depend on the machine and are reported in
docs/performance.md, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def bench_retrieval(database_url: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llm_bot.cli", "bench", "retrieval", "--json", *options],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "DATABASE_URL": database_url},
    )


def test_spread_and_depth_are_reported(fresh_database_url: str, tmp_path: Path) -> None:
    plot = tmp_path / "latency.png"
    done = bench_retrieval(
        fresh_database_url,
        *("--sizes", "200", "--history-turns", "400", "--users", "5", "--queries", "4"),
        *("--depth-turns", "300", "--depth-memories", "60", "--plot", str(plot)),
        *("--depth-plot", str(tmp_path / "recall-depth.png")),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded" in done.stderr  # progress lines while loading
    reports = json.loads(done.stdout)
    measured = [(r["kind"], r["size"], r["mode"]) for r in reports]
    modes = ("hybrid", "dense", "lexical")
    assert measured == [
        *(
            (kind, size, mode)
            for kind, size in [("memories", 200), ("history", 400)]
            for mode in modes
        ),
        *(("history-depth", 300, mode) for mode in modes),
        *(("history", 100, mode) for mode in modes),  # a typical user beside the deep one
        ("channel", 300, "hybrid"),
        *(("memories-depth", 60, mode) for mode in modes),
    ]
    for report in reports:
        assert report["queries"] == 4
        assert report["users"] == (1 if report["kind"] == "channel" else 5)  # speakers
        assert 0 < report["p50_ms"] <= report["p95_ms"] <= report["p99_ms"]
    assert "the index finds" in done.stderr  # its recall against the exact computation
    assert plot.stat().st_size > 0
    assert (tmp_path / "latency-depth.png").stat().st_size > 0
    assert (tmp_path / "recall-depth.png").stat().st_size > 0


def test_depth_only_skips_the_spread(fresh_database_url: str, tmp_path: Path) -> None:
    plot = tmp_path / "latency.png"
    done = bench_retrieval(
        fresh_database_url,
        *("--depth-only", "--depth-turns", "0", "--depth-memories", "40"),
        *("--users", "3", "--queries", "3", "--plot", str(plot)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert {r["kind"] for r in json.loads(done.stdout)} == {"memories-depth"}
    assert not plot.exists()
    assert (tmp_path / "latency-depth.png").stat().st_size > 0
