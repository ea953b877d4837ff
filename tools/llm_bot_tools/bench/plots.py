"""The plots of ``llm-bot bench``. ``run``: events/s and latency against in-flight, service next
to the raw transport, one line per model latency (the raw transport does not depend on it).
``retrieval``: p50 and p95 bars per data set and mode. ``citus-move``: each event's latency
over the run, the moves marked. ``run --profile``: the worker's CPU per event by stage.

matplotlib and the service bench (the whole local stack) are imported only when drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_bot_tools.bench.capacity_model import CapacityModel
    from llm_bot_tools.bench.cluster_move import MoveRun
    from llm_bot_tools.bench.retrieval import LatencyReport
    from llm_bot_tools.bench.service import RunReport


def plot_service(reports: list[RunReport], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rates, delays) = plt.subplots(1, 2, figsize=(11, 4.2))
    for latency in sorted({r.model_latency_ms for r in reports}):
        runs = sorted(
            (r for r in reports if r.model_latency_ms == latency), key=lambda r: r.in_flight
        )
        x = [r.in_flight for r in runs]
        label = f"service, model {latency:g} ms"
        rates.plot(x, [r.service.events_per_s for r in runs], marker="o", label=label)
        delays.plot(x, [r.service.p50_ms for r in runs], marker="o", label=f"{label} p50")
        delays.plot(x, [r.service.p95_ms for r in runs], marker="^", ls="--", label=f"{label} p95")
        if latency == min(r.model_latency_ms for r in reports):
            rates.plot(
                x, [r.raw.events_per_s for r in runs], marker="s", c="k", label="raw transport"
            )
            delays.plot(x, [r.raw.p50_ms for r in runs], marker="s", c="k", label="raw p50")
    rates.set(xlabel="in flight", ylabel="events/s (backlog drain)", yscale="log")
    workers = reports[0].workers  # one value per run
    rates.set_title(f"Throughput, {workers} worker process{'es' if workers > 1 else ''}")
    delays.set(xlabel="in flight", ylabel="ms, publish to output (closed loop)", yscale="log")
    delays.set_title("End-to-end latency")
    for axis in (rates, delays):
        axis.set_xscale("log", base=2)
        axis.set_xticks(
            sorted({r.in_flight for r in reports}),
            [str(k) for k in sorted({r.in_flight for r in reports})],
        )
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_latencies(reports: list[LatencyReport], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{_data(r)} {r.mode}" for r in reports]
    positions = range(len(reports))
    figure, axis = plt.subplots(figsize=(8, 4))
    axis.bar([p - 0.2 for p in positions], [r.p50_ms for r in reports], width=0.4, label="p50")
    axis.bar([p + 0.2 for p in positions], [r.p95_ms for r in reports], width=0.4, label="p95")
    axis.set_xticks(list(positions), labels, rotation=30, ha="right")
    axis.set_ylabel("ms per search (database side)")
    axis.set_title(title)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _data(report: LatencyReport) -> str:
    size = f"{report.size / 1000:g}k" if report.size >= 1000 else str(report.size)
    if report.kind.endswith("-depth"):
        return f"one user, {size} {report.kind.removesuffix('-depth')}"
    return f"{report.kind} {size}"


def plot_depth(reports: list[LatencyReport], path: Path, title: str) -> None:
    """Recall's p95 against the user's depth, log-log, one line per mode, beside a line of
    linear growth from the first depth: a curve flatter than it grows sub-linearly. A typical
    user and the shared channel are single points; memory search at depth is left to the bars
    (:func:`plot_latencies`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    deep = [r for r in reports if r.kind == "history-depth"]
    for mode in dict.fromkeys(r.mode for r in deep):
        runs = sorted((r for r in deep if r.mode == mode), key=lambda r: r.size)
        axis.plot([r.size for r in runs], [r.p95_ms for r in runs], marker="o", label=mode)
    hybrid = sorted((r for r in deep if r.mode == "hybrid"), key=lambda r: r.size)
    if hybrid:
        first = hybrid[0]
        sizes = [first.size, hybrid[-1].size]
        linear = [first.p95_ms, first.p95_ms * sizes[1] / sizes[0]]
        axis.plot(sizes, linear, ls=":", c="grey", label="linear in depth (hybrid)")
    for report in reports:
        if report.kind == "history" and report.mode == "hybrid":
            axis.scatter([report.size], [report.p95_ms], marker="s", c="k", label="typical user")
        if report.kind == "channel":
            label = f"channel, {report.users} speakers: window + recall"
            axis.scatter(
                [report.size], [report.p95_ms], marker="^", c="r", s=70, zorder=3, label=label
            )
    axis.set(xscale="log", yscale="log", xlabel="turns of the user (channel: of the channel)")
    axis.set(ylabel="p95 ms per recall (database side)", title=title)
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_storage(model: CapacityModel, path: Path) -> None:
    """Storage a year in against users, one line per embedding size, with one primary's disk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llm_bot_tools.bench.capacity_model import LARGEST_PRIMARY_BYTES

    millions = [n / 2 for n in range(0, 21)]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for size in model.sizes:
        axes.plot(
            millions,
            [m * size.storage_tb_per_million_users for m in millions],
            marker="o",
            markersize=3,
            label=f"{size.dimensions} dimensions ({size.bytes_per_user / 10**6:.1f} MB a user)",
        )
    axes.axhline(LARGEST_PRIMARY_BYTES / 10**12, color="grey", linestyle="--")
    axes.text(0.1, LARGEST_PRIMARY_BYTES / 10**12 * 1.02, "Cloud SQL's largest disk", color="grey")
    usage = model.usage
    axes.set_title(
        f"Database size a year in: {usage.events_per_user_month:g} events a user a month, "
        f"{usage.memories_per_user:g} memories",
        fontsize=10,
    )
    axes.set_xlabel("users (millions)")
    axes.set_ylabel("TB (heap, TOAST and indexes)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_move(run: MoveRun, model_latency_ms: float, path: Path) -> None:
    """Each event's time beyond the model against when it was published, the rebalance and
    the drain shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = min(run.sent.values())
    answered = sorted((at, cid) for cid, at in run.sent.items() if cid in run.arrived)
    figure, axis = plt.subplots(figsize=(11, 4.2))
    axis.scatter(
        [at - start for at, _ in answered],
        [(run.arrived[cid] - at) * 1000 - model_latency_ms for at, cid in answered],
        s=4,
        alpha=0.5,
    )
    moves = zip(run.phases[1:-1], ("tab:orange", "tab:red"), (0.98, 0.9), strict=True)
    for phase, colour, height in moves:
        axis.axvspan(phase.began - start, phase.ended - start, color=colour, alpha=0.2)
        place = axis.get_xaxis_transform()
        axis.text(phase.began - start, height, f" {phase.name}", transform=place, va="top")
    axis.set(xlabel="s, when published", ylabel="ms beyond the model, publish to output")
    axis.set_title(
        f"A node added and rebalanced onto, then one drained, under {len(run.sent)} events"
        f" from {len(run.marks)} users"
    )
    axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_stages(reports: list[RunReport], path: Path) -> None:
    """The worker's CPU per event by stage, a bar per stage and setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiled = [r for r in reports if r.cpu_by_stage]
    stages = list(dict.fromkeys(s.stage for r in profiled for s in r.cpu_by_stage))
    figure, axis = plt.subplots(figsize=(10, 0.35 * len(stages) * max(1, len(profiled)) + 1.5))
    height = 0.8 / max(1, len(profiled))
    for n, report in enumerate(profiled):
        cpu = {s.stage: s.cpu_ms for s in report.cpu_by_stage}
        axis.barh(
            [i + n * height for i in range(len(stages))],
            [cpu.get(stage, 0.0) for stage in stages],
            height=height,
            label=f"model {report.model_latency_ms:g} ms, in-flight {report.in_flight}"
            f"{', consolidation' if report.consolidation else ''}",
        )
    axis.set_yticks([i + 0.4 - height / 2 for i in range(len(stages))], stages)
    axis.invert_yaxis()
    axis.set(xlabel="ms of the worker's CPU per event")
    axis.set_title("Where the worker's CPU goes (py-spy over the backlog)")
    axis.grid(True, axis="x", alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
