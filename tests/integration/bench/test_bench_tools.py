"""``llm-bot bench tools`` with a few events: each case runs through a real MCP server, makes
the model and tool calls it says, and the cost of a tool round is reported.

Only the shape is checked: the figures depend on the machine and are reported in
docs/performance.md, never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SMALL = ("--events", "6", "--in-flight", "2")
FIELDS = {"p50_ms", "p95_ms", "cpu_ms", "loop_cpu_ms"}


def test_the_cases_and_the_cost_of_a_round_are_reported(fresh_database_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llm_bot.cli", "bench", "tools", "--json", *SMALL],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "DATABASE_URL": fresh_database_url},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    calls = [(c["case"], c["model_calls"], c["tool_calls"]) for c in report["cases"]]
    assert calls == [
        ("no tool", 1.0, 0.0),
        ("one tool", 2.0, 1.0),
        ("one tool, ledger", 2.0, 1.0),
    ]
    for case in report["cases"]:
        assert (case["events"], case["in_flight"]) == (6, 2)
        assert 0 < case["p50_ms"] <= case["p95_ms"], case
        assert 0 < case["loop_cpu_ms"] <= case["cpu_ms"], case
        assert f"# {case['case']}: p50 " in done.stderr  # a progress line each
    rounds = report["rounds"]
    assert [r["rounds"] for r in rounds] == ["one tool - no tool", "one tool, ledger - no tool"]
    assert all(set(r) >= FIELDS for r in rounds)
