"""``llm-bot bench capacity`` on the local stack, small: it completes, and what it counts adds up
(rows per event, memories per memory event, tool calls written); the figures themselves depend
on the machine and are reported in docs/performance.md, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llm_bot_tools.local.postgres_build import CLUSTER, find_install

pytestmark = pytest.mark.integration

KINDS = ["dm", "shared", "memory"]
TOOL_CALLS = 40
DIMENSIONS = 384
FLOAT_BYTES = 4


def capacity(tmp_path: Path, *more: str) -> tuple[dict[str, Any], str]:
    command = ["bench", "capacity", "--events", "20", "--statement-events", "20"]
    command += ["--dimensions", str(DIMENSIONS), "--tool-calls", str(TOOL_CALLS)]
    command += ["--history-turns", "10", "--users", "5", "--in-flight", "4"]
    command += ["--data-dir", str(tmp_path / "bench"), "--json", *more]
    done = subprocess.run(
        [sys.executable, "-m", "llm_bot.cli", *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report, done.stderr


def assert_sane(kind: dict[str, Any]) -> None:
    assert kind["events_per_s"] > 0, kind
    assert kind["db_cpu_ms_per_event"] > 0, kind
    assert kind["db_active_ms_per_event"] > 0, kind
    assert kind["wal_bytes_per_event"] > 0, kind
    assert kind["pages_per_event"] > 0, kind
    assert kind["worker_cpu_ms_per_event"] > 0, kind


def test_bench_capacity_measures_events_and_rows_on_one_node_and_on_citus(tmp_path: Path) -> None:
    """One run for both targets where Citus is built: the one-node part is the same either
    way, and the stack's start-up and the one-node events are the run's largest cost."""
    on_citus = find_install(CLUSTER) is not None
    plot = tmp_path / "storage.png"
    report, stderr = capacity(tmp_path, "--plot", str(plot), *(["--citus"] if on_citus else []))
    kinds = report["kinds"]
    targets = ["postgres", "citus"] if on_citus else ["postgres"]
    assert [(k["target"], k["kind"]) for k in kinds] == [
        (t, kind) for t in targets for kind in KINDS
    ]
    for kind in kinds:
        assert_sane(kind)
    assert all(k["statements"] for k in kinds if k["target"] == "postgres")  # the logged run
    assert not any(k["statements"] for k in kinds if k["target"] == "citus")
    # As many as `llm-bot migrate` distributes (none while it leaves the tables local).
    assert all(k["distributed_tables"] == 0 for k in kinds if k["target"] == "postgres")
    assert "database CPU" in stderr  # progress lines

    [stored] = report["storage"]
    rows = {r["table"]: r for r in stored["rows"]}
    events = stored["events"]  # every kind's, warm-ups and logged runs included
    assert rows["conversation_turns"]["rows"] == 2 * events  # a pair an event
    assert rows["processed_events"]["rows"] == events
    assert rows["memories"]["rows"] == events // len(KINDS)  # a new fact each memory event
    assert rows["tool_calls"]["rows"] == TOOL_CALLS
    # A turn holds its vector, whatever else.
    assert rows["conversation_turns"]["bytes_per_row"] > DIMENSIONS * FLOAT_BYTES

    [size] = report["model"]["sizes"]
    assert size["dimensions"] == DIMENSIONS
    assert size["storage_tb_per_million_users"] > 0
    assert size["events_per_s_per_vcpu"] > 0
    assert plot.stat().st_size > 0
