"""``llm-bot bench compare``: medians of repeated ``bench run --json`` outputs, per version of
the code, against the performance targets (docs/performance.md), as a table and a plot.

Single runs on the shared two-core machine move by a third; versions measured in alternation
and compared by their medians are what the performance notes report.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """One figure of ``bench run``'s report, in one setting, and the value it should reach."""

    title: str
    field: str
    limit: float
    setting: tuple[float, int] | None = None  # model latency ms, in flight; None: every run

    def covers(self, report: dict[str, object]) -> bool:
        """Whether ``report`` measured this figure in this setting: a report from a bench that
        did not yet measure the figure holds no field for it, and counts as not run there."""
        if self.field not in report:
            return False
        return self.setting is None or self.setting == (
            report["model_latency_ms"],
            report["in_flight"],
        )


# The service's performance targets (docs/performance.md, "Targets").
TARGETS = (
    Target(
        "worker CPU ms / event\n0 ms model, 16 in flight", "worker_cpu_ms_per_event", 5, (0, 16)
    ),
    Target(
        "beyond the model p50 ms\n800 ms model, 64 in flight", "beyond_model_p50_ms", 150, (800, 64)
    ),
    Target(
        "an event alone: worker ms\nbeyond the model, 800 ms",
        "worker_beyond_model_ms",
        40,
        (800, 1),
    ),
    Target(
        "write transactions / event\n800 ms model, 64 in flight",
        "write_transactions_per_event",
        0.3,
        (800, 64),
    ),
    Target("launch to ready s\nmigrated database, every run", "worker_ready_s", 3),
)


@dataclass(frozen=True)
class Comparison:
    target: Target
    medians: dict[str, float]  # label -> median over the label's runs in the target's setting
    runs: dict[str, list[float]]

    def as_dict(self) -> dict[str, object]:
        target = self.target
        return {
            "field": target.field,
            "setting": target.setting,
            "target": target.limit,
            "medians": self.medians,
            "runs": self.runs,
        }


def compare(versions: Sequence[tuple[str, Sequence[Path]]]) -> list[Comparison]:
    """``versions``: a label and the ``bench run --json`` files of its runs."""
    read = [(label, [(path, _reports(path)) for path in paths]) for label, paths in versions]
    comparisons = []
    for target in TARGETS:
        runs = {
            label: [
                _figure(path, report, target.field)
                for path, reports in files
                for report in reports
                if target.covers(report)
            ]
            for label, files in read
        }
        runs = {label: values for label, values in runs.items() if values}
        if runs:
            medians = {label: statistics.median(values) for label, values in runs.items()}
            comparisons.append(Comparison(target, medians, runs))
    return comparisons


def _reports(path: Path) -> list[dict[str, object]]:
    """The reports of a ``bench run --json`` file: a list of JSON objects."""
    reports = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(reports, list) or not all(isinstance(r, dict) for r in reports):
        raise ValueError(f"{path} is not a list of bench run reports")
    return reports


def _figure(path: Path, report: dict[str, object], field: str) -> float:
    """``report``'s ``field``, a finite number: a median of NaN or infinity (which JSON from
    Python may hold) would be reported as a version's figure, and a plot of one fails."""
    value = report[field]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{path}: {field} is {json.dumps(value)}, not a finite number")
    return float(value)


def plot_comparisons(comparisons: Sequence[Comparison], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(comparisons), figsize=(3.3 * len(comparisons), 4))
    for axis, comparison in zip(axes if len(comparisons) > 1 else [axes], comparisons, strict=True):
        labels = list(comparison.medians)
        values = [comparison.medians[label] for label in labels]
        bars = axis.bar(labels, values, color=["#bbbbbb", *["#3274b8"] * (len(labels) - 1)])
        axis.bar_label(bars, [f"{value:.3g}" for value in values], fontsize=8)
        limit = comparison.target.limit
        axis.axhline(limit, color="red", ls="--", lw=1, label=f"target {limit:g}")
        axis.set_ylim(0, max(*values, limit) * 1.25)
        axis.set_title(comparison.target.title, fontsize=9)
        axis.tick_params(axis="x", labelsize=8)
        axis.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
