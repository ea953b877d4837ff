"""``llm-bot bench ...``: performance measurements on the local stack, with a JSON and a plot."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from llm_bot.bench.retrieval import LatencyReport, run_recall_bench, run_retrieval_bench
from llm_bot.cli_support import database_for_measurements
from llm_bot.settings import Settings


def add_bench_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="performance benchmarks")
    kinds = bench.add_subparsers(dest="kind", required=True, parser_class=parser_class)
    retrieval = kinds.add_parser(
        "retrieval", help="memory search and history recall latency (database side)"
    )
    retrieval.add_argument(
        "--sizes", type=sizes, default=[10_000, 100_000], help="e.g. 10000,100000"
    )
    retrieval.add_argument("--history-turns", type=int, default=100_000, help="0 skips recall")
    retrieval.add_argument("--users", type=int, default=1000)
    retrieval.add_argument("--queries", type=int, default=300, help="per size and mode")
    retrieval.add_argument("--plot", type=Path, help="write a PNG bar chart here")
    retrieval.add_argument("--json", action="store_true", help="print JSON")
    retrieval.set_defaults(handler=run_retrieval)


def sizes(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers like 10000,100000, got {text!r}"
        ) from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("sizes must be positive")
    return values


def run_retrieval(args: argparse.Namespace, settings: Settings) -> int:
    with database_for_measurements(settings) as url:
        reports = asyncio.run(
            run_retrieval_bench(url, args.sizes, args.users, args.queries, progress)
        )
        if args.history_turns:
            reports += asyncio.run(
                run_recall_bench(url, args.history_turns, args.users, args.queries, progress)
            )
    if args.plot:
        plot_latencies(reports, args.plot)
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    print("kind      size     users  mode     p50 ms  p95 ms  p99 ms")
    for r in reports:
        latencies = f"{r.p50_ms:6.2f}  {r.p95_ms:6.2f}  {r.p99_ms:6.2f}"
        print(f"{r.kind:8s}  {r.size:7d}  {r.users:5d}  {r.mode:7s}  {latencies}")
    return 0


def progress(line: str) -> None:
    print(f"# {line}", file=sys.stderr, flush=True)


def plot_latencies(reports: list[LatencyReport], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.kind} {r.size // 1000}k {r.mode}" for r in reports]
    positions = range(len(reports))
    figure, axis = plt.subplots(figsize=(8, 4))
    axis.bar([p - 0.2 for p in positions], [r.p50_ms for r in reports], width=0.4, label="p50")
    axis.bar([p + 0.2 for p in positions], [r.p95_ms for r in reports], width=0.4, label="p95")
    axis.set_xticks(list(positions), labels, rotation=30, ha="right")
    axis.set_ylabel("ms per search (database side)")
    axis.set_title(f"Memory search latency, {reports[0].users if reports else 0} users")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
