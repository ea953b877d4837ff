"""``llm-bot bench compare``: medians per version and target from ``bench run --json`` files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_bot.cli import main


def run_file(path: Path, *reports: dict[str, float]) -> str:
    """A ``bench run --json`` output holding ``reports`` (only the fields compare reads)."""
    path.write_text(json.dumps(list(reports)))
    return str(path)


def report(latency: float, in_flight: int, cpu: float, ready: float) -> dict[str, float]:
    return {
        "model_latency_ms": latency,
        "in_flight": in_flight,
        "worker_cpu_ms_per_event": cpu,
        "beyond_model_p50_ms": 300.0,
        "worker_beyond_model_ms": 30.0,
        "write_transactions_per_event": 0.2,
        "worker_ready_s": ready,
    }


def test_medians_per_version_in_each_targets_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = [
        run_file(tmp_path / f"before-{i}.json", report(0, 16, cpu, 2.0), report(800, 64, 50, 4.0))
        for i, cpu in enumerate([9.0, 12.0, 10.0])
    ]
    after = [run_file(tmp_path / "after.json", report(0, 16, 7.0, 1.5))]
    plot = tmp_path / "compare.png"
    argv = ["bench", "compare", "--version", "before", *before, "--version", "after", *after]
    assert main([*argv, "--plot", str(plot), "--json"]) == 0
    by_field = {c["field"]: c for c in json.loads(capsys.readouterr().out)}
    # CPU is read at 0 ms / 16 only (the 50 ms of the 800 ms runs are left out).
    assert by_field["worker_cpu_ms_per_event"]["medians"] == {"before": 10.0, "after": 7.0}
    assert by_field["worker_cpu_ms_per_event"]["runs"]["before"] == [9.0, 12.0, 10.0]
    # The cold start pools every run; no run of "after" has the 800 ms / 64 setting.
    assert by_field["worker_ready_s"]["medians"] == {"before": 3.0, "after": 1.5}
    assert by_field["beyond_model_p50_ms"]["medians"] == {"before": 300.0}
    assert "worker_beyond_model_ms" not in by_field  # nobody ran an event alone
    assert plot.stat().st_size > 0


def test_a_report_without_a_figure_is_left_out_of_that_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stored report from a bench that did not yet measure CPU still counts for the rest."""
    older = report(0, 16, 9.0, 2.0)
    del older["worker_cpu_ms_per_event"]
    files = [run_file(tmp_path / "older.json", older)]
    assert main(["bench", "compare", "--version", "older", *files, "--json"]) == 0
    by_field = {c["field"]: c for c in json.loads(capsys.readouterr().out)}
    assert "worker_cpu_ms_per_event" not in by_field
    assert by_field["worker_ready_s"]["medians"] == {"older": 2.0}


@pytest.mark.parametrize(
    "versions",
    [
        ["--version", "only-a-label"],
        ["--version", "v", "missing.json"],
        ["--version", "v", "{run}", "--version", "v", "{run}"],
    ],
    ids=["no-files", "missing-file", "same-label-twice"],
)
def test_bad_versions_cost_one_line(
    versions: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_file(tmp_path / "run.json", report(0, 16, 9.0, 2.0))
    assert main(["bench", "compare", *(part.format(run=run) for part in versions)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[{"worker_ready_s": NaN}]', "worker_ready_s is NaN, not a finite number"),
        ('[{"worker_ready_s": Infinity}]', "worker_ready_s is Infinity, not a finite number"),
        ('[{"worker_ready_s": true}]', "worker_ready_s is true, not a finite number"),
        ('[{"worker_ready_s": "2"}]', 'worker_ready_s is "2", not a finite number'),
        ("[1, 2]", "a list of bench run reports"),
        ('{"worker_ready_s": 2}', "a list of bench run reports"),
    ],
)
def test_a_run_that_is_no_report_of_finite_figures_costs_one_line(
    text: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before a plot fails on it (NaN or infinity) or a median is taken of it."""
    path = tmp_path / "run.json"
    path.write_text(text)
    plot = tmp_path / "compare.png"
    assert main(["bench", "compare", "--version", "v", str(path), "--plot", str(plot)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(path) in line
    assert error in line
    assert not plot.exists()
