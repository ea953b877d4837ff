"""``llm-bot bench floor``, small: every library's operation runs and is reported.

The figures depend on the machine and are reported in docs/performance.md, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

OPERATIONS = [
    "graph",
    "model call",
    "embeddings call",
    "model call, aiohttp alone",
    "statement",
    "pubsub",
]


def test_bench_floor_measures_each_library_alone(tmp_path: Path) -> None:
    command = ["bench", "floor", "--operations", "40", "--data-dir", str(tmp_path / "b"), "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "llm_bot.cli", *command],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = json.loads(done.stdout)
    assert [r["operation"] for r in reports] == OPERATIONS
    for report in reports:
        assert report["cpu_ms"] > 0, report
        assert report["operations_per_s"] > 0, report
        assert f"# {report['operation']}: " in done.stderr  # a progress line each
