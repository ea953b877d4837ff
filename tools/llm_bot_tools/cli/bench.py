"""``llm-bot bench ...``: performance measurements on the local stack, with a JSON and a plot."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_bot.cli.support import UsageError, at_least_zero, output_dir, output_file, positive
from llm_bot.settings import MAX_VECTOR_DIMENSIONS, Settings
from llm_bot_tools.cli.measurements import database_for_measurements, number_list, progress

if TYPE_CHECKING:  # the benches pull in the graph, memory and the local stack: load when run
    from llm_bot_tools.bench.retrieval import LatencyReport
    from llm_bot_tools.bench.service import RunReport


def add_bench_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser(
        "bench", help="performance benchmarks (plain `bench` is `bench run` with its defaults)"
    )
    kinds = bench.add_subparsers(dest="kind", parser_class=parser_class)
    add_run_command(kinds, bench)
    retrieval = kinds.add_parser(
        "retrieval", help="memory search and history recall latency (database side)"
    )
    retrieval.add_argument(
        "--sizes", type=sizes, default=[10_000, 100_000], help="e.g. 10000,100000"
    )
    retrieval.add_argument(
        "--history-turns", type=at_least_zero, default=100_000, help="0 skips recall"
    )
    retrieval.add_argument(
        "--depth-turns",
        type=at_least_zero,
        default=100_000,
        help="recall for one user this deep; 0 skips",
    )
    retrieval.add_argument(
        "--depth-memories",
        type=at_least_zero,
        default=10_000,
        help="memory search for one user with this many memories; 0 skips",
    )
    retrieval.add_argument(
        "--depth-only", action="store_true", help="only the one-user part (no --sizes, recall)"
    )
    retrieval.add_argument("--users", type=positive, default=1000)
    retrieval.add_argument("--queries", type=positive, default=300, help="per size and mode")
    retrieval.add_argument(
        "--plot",
        type=output_file,
        help="write a PNG bar chart here, and the one-user part's beside it (NAME-depth.png)",
    )
    retrieval.add_argument(
        "--depth-plot",
        type=output_file,
        help="write a PNG of recall's p95 against the user's depth",
    )
    retrieval.add_argument("--json", action="store_true", help="print JSON")
    retrieval.set_defaults(handler=run_retrieval)
    floor = kinds.add_parser(
        "floor", help="CPU per operation of the libraries an event goes through, each alone"
    )
    floor.add_argument("--operations", type=positive, default=2000, help="of each kind")
    floor.add_argument("--data-dir", type=output_dir, default=Path(".llm-bot/bench"))
    floor.add_argument("--json", action="store_true", help="print JSON")
    floor.set_defaults(handler=run_floor)
    add_tools_command(kinds)
    add_capacity_command(kinds)
    add_citus_move_command(kinds)
    compare = kinds.add_parser(
        "compare", help="medians of repeated `bench run --json` outputs per version, vs targets"
    )
    compare.add_argument(
        "--version",
        nargs="+",
        action="append",
        required=True,
        metavar="LABEL FILE",
        help="a label, then the JSON files of its runs; once per version, the baseline first",
    )
    compare.add_argument("--plot", type=output_file, help="write a PNG, one panel per target")
    compare.add_argument("--title", default="Medians of repeated runs")
    compare.add_argument("--json", action="store_true", help="print JSON")
    compare.set_defaults(handler=run_compare)


def add_run_command(kinds: Any, bench: argparse.ArgumentParser) -> None:
    run = kinds.add_parser("run", help="the whole service against the raw transport")
    run.add_argument("--events", type=positive, default=2000, help="backlog per setting")
    run.add_argument("--users", type=positive, default=100)
    run.add_argument("--threads", type=positive, default=200)
    run.add_argument("--in-flight", type=sizes, default=[16, 64], help="e.g. 16,64")
    run.add_argument(
        "--model-latency-ms", type=latencies, default=[0.0], help="local model delay, e.g. 0,800"
    )
    run.add_argument(
        "--embeddings",
        choices=["server", "local"],
        default="server",
        help="server: the local model server (default); local: all-MiniLM-L6-v2 in the worker",
    )
    run.add_argument(
        "--workers",
        type=positive,
        default=1,
        help="worker processes sharing the subscription (the in-flight limit is split)",
    )
    run.add_argument(
        "--consolidation",
        action="store_true",
        help="each setting twice back to back: consolidation off, then on (sessions closing"
        " after 1 s of silence, so jobs run beside the answering)",
    )
    run.add_argument("--data-dir", type=output_dir, default=Path(".llm-bot/bench"))
    run.add_argument("--plot", type=output_file, help="write a PNG of events/s and latency here")
    run.add_argument(
        "--profile",
        type=output_dir,
        help="py-spy the workers over the backlog: the raw profiles, and stages.png of the CPU"
        " per event by stage, in this folder",
    )
    run.add_argument("--json", action="store_true", help="print JSON")
    run.set_defaults(handler=run_service)
    # Plain `llm-bot bench`: the run with every default, as if `run` had been given.
    bench.set_defaults(handler=lambda _, settings: run_service(run.parse_args([]), settings))


def add_tools_command(kinds: Any) -> None:
    tools = kinds.add_parser(
        "tools", help="wall time and CPU one platform-tool round adds to an event (in-process)"
    )
    tools.add_argument("--events", type=positive, default=200, help="per case")
    tools.add_argument("--in-flight", type=positive, default=1, help="events answered at once")
    tools.add_argument(
        "--transport",
        choices=["sse", "streamable-http"],
        default="sse",
        help="the MCP server's, as MCP_GATEWAY_TRANSPORT (sse: BitBrat's gateway's)",
    )
    tools.add_argument(
        "--no-ledger", action="store_true", help="skip the case with the Postgres ledger"
    )
    tools.add_argument("--json", action="store_true", help="print JSON")
    tools.set_defaults(handler=run_tools)


def add_capacity_command(kinds: Any) -> None:
    capacity = kinds.add_parser(
        "capacity",
        help="database CPU, active time and WAL per event, bytes per row: the capacity model",
    )
    capacity.add_argument("--events", type=positive, default=2000, help="per kind and size")
    capacity.add_argument(
        "--statement-events", type=positive, default=200, help="per kind, every statement logged"
    )
    capacity.add_argument("--users", type=positive, default=100)
    capacity.add_argument("--in-flight", type=positive, default=16)
    capacity.add_argument("--model-latency-ms", type=duration, default=0.0)
    capacity.add_argument(
        "--dimensions",
        type=number_list(int, 1, "384,1536", MAX_VECTOR_DIMENSIONS),
        default=[384, 1536],
        help="embedding sizes, e.g. 384,1536",
    )
    capacity.add_argument(
        "--tool-calls", type=positive, default=10_000, help="rows written through the ledger"
    )
    capacity.add_argument(
        "--history-turns",
        type=at_least_zero,
        default=2400,
        help="turns loaded for each user before the events (0: none)",
    )
    capacity.add_argument(
        "--citus",
        action="store_true",
        help="also run the events on a local Citus cluster (coordinator and two workers)",
    )
    capacity.add_argument("--data-dir", type=output_dir, default=Path(".llm-bot/bench"))
    capacity.add_argument(
        "--plot", type=output_file, help="write a PNG of storage against users here"
    )
    capacity.add_argument("--json", action="store_true", help="print JSON")
    capacity.set_defaults(handler=run_capacity)


def add_citus_move_command(kinds: Any) -> None:
    move = kinds.add_parser(
        "citus-move",
        help="a Citus node added and rebalanced onto, then one drained, while a worker answers",
    )
    move.add_argument("--users", type=positive, default=2000, help="each sends in turn")
    move.add_argument("--rate", type=rate, default=10.0, help="events published a second")
    move.add_argument(
        "--settle-s", type=duration, default=30.0, help="traffic before the moves, and after"
    )
    move.add_argument("--model-latency-ms", type=duration, default=200.0)
    move.add_argument("--shard-count", type=positive, default=8, help="of each table")
    move.add_argument("--data-dir", type=output_dir, default=Path(".llm-bot/bench"))
    move.add_argument("--plot", type=output_file, help="write a PNG of latency over the run here")
    move.add_argument("--json", action="store_true", help="print JSON")
    move.set_defaults(handler=run_citus_move)


def rate(text: str) -> float:
    """An argparse type: a rate above zero, else a one-line error."""
    value = duration(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be above 0")
    return value


def duration(text: str) -> float:
    """An argparse type: a number from zero to ``threading.TIMEOUT_MAX``, the longest wait
    Python's clocks take (a longer one fails the wait it reaches), else a one-line error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a number from 0 to {threading.TIMEOUT_MAX:.0f}, got {text}"
        )
    return value


sizes = number_list(int, 1, "10000,100000")
latencies = number_list(float, 0.0, "0,800")


def run_service(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.service import BenchConfig, bench_stack, run_setting

    config = BenchConfig(
        args.events,
        args.users,
        args.threads,
        args.embeddings,
        args.data_dir,
        args.workers,
        profile=args.profile,
    )
    configs = [config, replace(config, consolidation=True)] if args.consolidation else [config]
    with bench_stack(config.data_dir) as stack:
        reports = [
            run_setting(stack, each, latency, in_flight, progress)
            for latency in args.model_latency_ms
            for in_flight in args.in_flight
            for each in configs
        ]
    if args.plot:
        from llm_bot_tools.bench.plots import plot_service

        plot_service(reports, args.plot)
    if args.profile:
        from llm_bot_tools.bench.plots import plot_stages

        plot_stages(reports, args.profile / "stages.png")
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    print(SERVICE_HEADER)
    for r in reports:
        print(service_row(r))
    for r in reports:
        if r.cpu_by_stage:
            setting = f"model {r.model_latency_ms:g} ms, in-flight {r.in_flight}"
            print(f"\nCPU per event by stage, {setting}")
            for stage in r.cpu_by_stage:
                print(f"{stage.stage:32s}  {stage.cpu_ms:6.2f} ms  {stage.share:6.1%}")
    return 0


SERVICE_HEADER = (
    "model ms  in-flight  workers  service/s  raw/s   ratio   p50 ms  p95 ms  p99 ms  "
    "raw p50  beyond p50  cpu ms/ev  writes/ev  model/ev  rss MB  ready s  deadlocks  jobs"
)


def service_row(r: RunReport) -> str:
    s = r.service
    return (
        f"{r.model_latency_ms:8g}  {r.in_flight:9d}  {r.workers:7d}  {s.events_per_s:9.1f}  "
        f"{r.raw.events_per_s:6.0f}  {r.ratio:6.1%}  {s.p50_ms:6.0f}  {s.p95_ms:6.0f}  "
        f"{s.p99_ms:6.0f}  {r.raw.p50_ms:7.1f}  {r.beyond_model_p50_ms:10.0f}  "
        f"{r.worker_cpu_ms_per_event:9.2f}  {r.write_transactions_per_event:9.2f}  "
        f"{r.model_calls_per_event:8.2f}  {r.worker_peak_rss_mb:6.0f}  {r.worker_ready_s:7.2f}  "
        f"{r.deadlocks:9d}  {r.consolidation_jobs if r.consolidation else '-':>4}"
    )


def run_citus_move(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.cluster_move import MoveConfig, run_cluster_move

    config = MoveConfig(
        users=args.users,
        rate_per_s=args.rate,
        settle_s=args.settle_s,
        model_latency_ms=args.model_latency_ms,
        shard_count=args.shard_count,
    )
    run, report = run_cluster_move(args.data_dir, config, progress)
    if args.plot:
        from llm_bot_tools.bench.plots import plot_move

        plot_move(run, config.model_latency_ms, args.plot)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    print(f"{report.events} events from {report.users} users at {report.rate_per_s:g}/s")
    print("phase      events  p50 ms beyond the model  p95 ms")
    for name, figures in report.by_phase.items():
        events, p50, p95 = figures["events"], figures["p50_ms"], figures["p95_ms"]
        print(f"{name:9s}  {events:6.0f}  {p50:23.0f}  {p95:6.0f}")
    print(
        f"during the moves / before: p50 {report.moving_over_before_p50:.2f},"
        f" p95 {report.moving_over_before_p95:.2f}"
    )
    for move in report.moves:
        print(
            f"{move['name']}: {move['shards']} shards, {float(move['bytes']) / 1e6:.1f} MB in"
            f" {float(move['seconds']):.1f} s ({float(move['shards_per_minute']):.0f} shards,"
            f" {float(move['mb_per_minute']):.1f} MB a minute)"
        )
    print(
        f"retried {report.retried}, dead-lettered {report.dead_letters},"
        f" duplicated {report.duplicated}, lost {report.lost}"
    )
    return 0


def run_floor(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.floor import run_floor_bench
    from llm_bot_tools.bench.service import bench_stack

    with bench_stack(args.data_dir) as stack:
        reports = run_floor_bench(stack, args.operations, progress)
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    print("operation                    CPU ms each   operations/s")
    for r in reports:
        print(f"{r.operation:27s}  {r.cpu_ms:11.3f}  {r.operations_per_s:13.0f}")
    return 0


def run_compare(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.compare import compare, plot_comparisons

    if any(len(version) < 2 for version in args.version):
        raise UsageError("--version takes a label and at least one JSON file")
    versions = [(label, [Path(name) for name in names]) for label, *names in args.version]
    labels = [label for label, _ in versions]
    if len(set(labels)) < len(labels):  # the medians are by label: one would hide the other
        raise UsageError(f"--version labels must differ, got {' '.join(labels)}")
    try:
        comparisons = compare(versions)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"cannot read the runs: {type(error).__name__}: {error}") from None
    if not comparisons:
        raise UsageError("no run in the files has a setting that a target is measured in")
    if args.plot:
        plot_comparisons(comparisons, args.plot, args.title)
    if args.json:
        print(json.dumps([c.as_dict() for c in comparisons], indent=2))
        return 0
    for c in comparisons:
        medians = "  ".join(f"{label} {value:.3g}" for label, value in c.medians.items())
        print(f"{c.target.field:30s} target {c.target.limit:<5g}  {medians}")
    return 0


TOOLS_HEADER = (
    "case               events  in-flight  p50 ms  p95 ms  cpu ms/ev  loop cpu ms/ev  "
    "model/ev  tools/ev"
)


def run_tools(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.tools import run_tools_bench

    if args.no_ledger:
        report = run_tools_bench(args.events, args.in_flight, args.transport, None, progress)
    else:
        with database_for_measurements(settings) as url:
            report = run_tools_bench(args.events, args.in_flight, args.transport, url, progress)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    print(TOOLS_HEADER)
    for c in report.cases:
        print(
            f"{c.case:17s}  {c.events:6d}  {c.in_flight:9d}  {c.p50_ms:6.1f}  {c.p95_ms:6.1f}  "
            f"{c.cpu_ms:9.2f}  {c.loop_cpu_ms:14.2f}  {c.model_calls:8.2f}  {c.tool_calls:8.2f}"
        )
    for r in report.rounds:
        print(
            f"one tool round ({r.rounds}): p50 {r.p50_ms:+.1f} ms, p95 {r.p95_ms:+.1f} ms, "
            f"CPU {r.cpu_ms:+.2f} ms ({r.loop_cpu_ms:+.2f} on the loop)"
        )
    return 0


def run_retrieval(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.depth import run_depth_bench
    from llm_bot_tools.bench.retrieval import run_recall_bench, run_retrieval_bench

    with database_for_measurements(settings) as url:
        reports: list[LatencyReport] = []
        if not args.depth_only:
            reports += asyncio.run(
                run_retrieval_bench(url, args.sizes, args.users, args.queries, progress)
            )
            if args.history_turns:
                reports += asyncio.run(
                    run_recall_bench(url, args.history_turns, args.users, args.queries, progress)
                )
        depth = asyncio.run(
            run_depth_bench(
                url, args.depth_turns, args.depth_memories, args.users, args.queries, progress
            )
        )
    if args.plot:
        from llm_bot_tools.bench.plots import plot_latencies

        if reports:
            plot_latencies(reports, args.plot, f"Memory search and recall, {args.users} users")
        if depth:
            title = f"One user's depth, among {args.users} others"
            plot_latencies(depth, args.plot.with_stem(f"{args.plot.stem}-depth"), title)
    if args.depth_plot and depth:
        from llm_bot_tools.bench.plots import plot_depth

        title = f"Recall against a user's depth, among {args.users} typical users"
        plot_depth(depth, args.depth_plot, title)
    reports += depth
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    print("kind            size     users  mode     p50 ms  p95 ms  p99 ms")
    for r in reports:
        percentiles = f"{r.p50_ms:6.2f}  {r.p95_ms:6.2f}  {r.p99_ms:6.2f}"
        print(f"{r.kind:14s}  {r.size:7d}  {r.users:5d}  {r.mode:7s}  {percentiles}")
    return 0


def run_capacity(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.bench.capacity import CapacityConfig, run_capacity
    from llm_bot_tools.bench.capacity_model import model_of, render

    config = CapacityConfig(
        events=args.events,
        statement_events=args.statement_events,
        users=args.users,
        in_flight=args.in_flight,
        model_latency_ms=args.model_latency_ms,
        dimensions=args.dimensions,
        tool_calls=args.tool_calls,
        history_turns=args.history_turns,
        data_dir=args.data_dir,
        citus=args.citus,
    )
    report = run_capacity(config, progress)
    model = model_of(report)
    if args.plot:
        from llm_bot_tools.bench.plots import plot_storage

        plot_storage(model, args.plot)
    if args.json:
        print(json.dumps({**report.as_dict(), "model": model.as_dict()}, indent=2))
        return 0
    print(render(report, model))
    return 0
