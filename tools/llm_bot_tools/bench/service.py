"""``llm-bot bench run``: the whole service against the raw transport, on the local stack.

The stack (Pub/Sub emulator, embedded Postgres under ``.llm-bot/bench``, local model server)
runs in this process as the worker tests run it; the worker runs as a ``llm-bot run`` child,
as in production, so its own memory (peak RSS from ``/proc``) and CPU are its own. Each
setting (a model latency and an in-flight limit) gets fresh topics and a fresh database, and
measures the raw transport first, then the worker, on the same messages.

Write transactions are counted by Postgres itself: a transaction is given a transaction id
only when it writes, so the growth of ``pg_current_xact_id()`` over a run is the number of
write transactions (read-only ones, like recall, cost none), whoever issued them. So are
deadlocks: ``pg_stat_database.deadlocks`` of the setting's database, read before the workers
start and once their sessions ended (:mod:`llm_bot_tools.bench.deadlocks`), counts the
deadlocks PostgreSQL broke during the run (each costs a lease renewal or a commit retry and
``deadlock_timeout`` of waiting); a run should have none.

The worker's own counts (received, acked, transactions, ...) are read from its ``/metrics``,
as Prometheus reads them, once it holds no event.

What a user pays for is reported as such: the worker's CPU per event (from ``/proc``, between
ready and stop, over every event of the setting) and the time an event spends beyond the model
(closed-loop latency less the model server's configured delay), besides the launch-to-ready
time of the worker on a migrated database (its cold start).
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from uuid import uuid4

import psycopg

from llm_bot.consolidation.extraction import TURNS_HEADER
from llm_bot.db.migrate import migrate
from llm_bot.memory.derived import JOB_STEP
from llm_bot_tools.bench.deadlocks import deadlocks
from llm_bot_tools.bench.load import (
    Arrivals,
    Outgoing,
    Progress,
    bench_events,
    closed_loop_latencies_ms,
    percentiles_ms,
    publish_all,
)
from llm_bot_tools.bench.procfs import cpu_seconds, peak_rss_kb
from llm_bot_tools.bench.stages import Profile, StageCpu, profiled
from llm_bot_tools.devstack.worker_harness import (
    Bus,
    WorkerProcess,
    metric_samples,
    model_environment,
    worker_counts,
)
from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.openai_server import CHAT_PATH, EMBEDDINGS_PATH, LocalModelServer
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator

BENCH_EXTRACTION = json.dumps({"facts": [], "summary": "A benchmark session."})
EGRESS_TAP_MAX_MESSAGES = 1000
BENCH_LEASE_EXTENSION_S = 60
IN_FLIGHT = "llmbot_in_flight"  # events a worker holds (llm_bot/telemetry/metrics.py)
POLL_S = 0.05


@dataclass(frozen=True)
class BenchConfig:
    events: int
    users: int
    threads: int
    embeddings: str  # "server" (the local model server) or "local" (all-MiniLM-L6-v2)
    data_dir: Path
    # Worker processes sharing the subscription, as instances would; the in-flight limit of a
    # setting is split between them.
    workers: int = 1
    timeout_s: float = 600.0
    # Memory consolidation on in the workers, sessions closing after a second of silence, so
    # jobs run beside the answering throughout the run.
    consolidation: bool = False
    # Where py-spy's profiles of the workers over the backlog go (llm_bot_tools.bench.stages);
    # None: no profile.
    profile: Path | None = None


@dataclass(frozen=True)
class Side:
    """One consumer's figures: backlog drain rate and closed-loop latency."""

    events_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float


@dataclass(frozen=True)
class RunReport:
    model_latency_ms: float
    in_flight: int
    workers: int
    embeddings: str
    events: int
    latency_events: int
    service: Side
    raw: Side
    ratio: float  # service events/s over raw events/s
    write_transactions_per_event: float
    model_calls_per_event: float
    embedding_calls_per_event: float
    worker_peak_rss_mb: float  # the largest of the workers'
    worker_counts: dict[str, int]  # summed over the workers, from their /metrics
    # CPU time of the worker processes (all threads, summed over the workers) from ready to
    # stop, over the setting's events: backlog and closed loop.
    worker_cpu_ms_per_event: float
    # Closed-loop latency less the model server's configured delay: the time in llm-bot (and
    # the bus) that a chat user feels.
    beyond_model_p50_ms: float
    beyond_model_p95_ms: float
    # The worker's own time per event (Little's law over the backlog drain: in-flight / rate)
    # less the model delay. The backlog is already in the client's buffers, so no bus hop is in
    # it: at in-flight 1 it is what an event alone spends in llm-bot beyond the model.
    worker_beyond_model_ms: float
    worker_ready_s: float  # launch to /ready answering 200, the slowest worker
    deadlocks: int  # broken by PostgreSQL in the setting's database from ready to stop
    consolidation: bool = False
    consolidation_jobs: int = 0  # jobs done in the setting's run
    # With a profile: the workers' CPU per event over the backlog by stage (stages.py),
    # largest first.
    cpu_by_stage: list[StageCpu] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Stack:
    emulator: PubSubEmulator
    postgres: EmbeddedPostgres
    model: LocalModelServer
    logs: Path


@contextlib.contextmanager
def bench_stack(data_dir: Path) -> Iterator[Stack]:
    with contextlib.ExitStack() as stack:
        emulator = stack.enter_context(PubSubEmulator(data_dir / "pubsub"))
        postgres = stack.enter_context(EmbeddedPostgres(data_dir / "postgres"))
        model = stack.enter_context(LocalModelServer())
        logs = data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        yield Stack(emulator, postgres, model, logs)


def latency_events(events: int, in_flight: int) -> int:
    """Enough closed-loop events for stable percentiles, a fraction of the backlog's cost."""
    return min(events, max(4 * in_flight, events // 4, 20))


def run_setting(
    stack: Stack, config: BenchConfig, model_latency_ms: float, in_flight: int, progress: Progress
) -> RunReport:
    stack.model.reset()
    stack.model.latency_ms = model_latency_ms
    # A consolidation's extraction gets a valid reply: a summary, written as a recall key.
    stack.model.reply_to_prefix(TURNS_HEADER, BENCH_EXTRACTION)
    prefix = f"b{uuid4().hex[:10]}"
    label = f"model {model_latency_ms:g} ms, in-flight {in_flight}"
    raw = measure_raw(stack, config, prefix, in_flight, progress, f"{label}, raw")
    url = stack.postgres.create_database(prefix)
    try:
        migrate(url)
        return measure_service(stack, config, prefix, url, in_flight, raw, progress, label)
    finally:
        stack.postgres.drop_database(prefix)


def measure_raw(
    stack: Stack, config: BenchConfig, prefix: str, in_flight: int, progress: Progress, label: str
) -> Side:
    bus = Bus(stack.emulator, f"{prefix}-raw", {})
    try:
        backlog = bench_events(prefix, config.events, config.users, config.threads, "unused")
        closed = bench_events(
            f"{prefix}-l", latency_events(config.events, in_flight), 1, 1, "unused"
        )
        publish_all(bus.clients.publisher, bus.topology.input_topic, backlog)
        consumer = Arrivals(bus.clients.subscriber, bus.topology.input_subscription, in_flight)
        consumer.start()
        try:
            ids = [e.correlation_id for e in backlog]
            consumer.wait_for(ids, config.timeout_s, progress, f"{label} backlog")
            rate = drain_rate([consumer.times[i] for i in ids])
            latencies = closed_loop_latencies_ms(
                bus.clients.publisher,
                bus.topology.input_topic,
                closed,
                consumer,
                in_flight,
                config.timeout_s,
                progress,
            )
        finally:
            consumer.stop()
    finally:
        bus.close()
    progress(f"{label}: {rate:.0f} events/s")
    return Side(rate, *percentiles_ms(latencies))


def worker_environment(
    stack: Stack, config: BenchConfig, url: str, in_flight: int
) -> dict[str, str]:
    """One worker's settings; each takes its share of the setting's in-flight limit."""
    environment = {
        **model_environment(stack.model),
        # Production's timeouts, not the tests' short ones: queueing at 64 in flight is normal.
        "OPENAI_TIMEOUT_MS": "30000",
        "LLM_BOT_MODEL_DEADLINE_MS": "60000",
        "DATABASE_URL": url,
        "LLM_BOT_MAX_IN_FLIGHT": str(math.ceil(in_flight / config.workers)),
        # The emulator ignores the stream's flow control and pushes the whole backlog at once;
        # what waits unread in the client's buffers past the stream's ack deadline (the lease
        # step) is delivered again. Real Pub/Sub sends no more than the flow control allows,
        # so a longer step keeps that emulator artifact out of the service's figures.
        "LLM_BOT_LEASE_EXTENSION_S": str(BENCH_LEASE_EXTENSION_S),
    }
    if config.embeddings == "local":
        environment["MEMORY_EMBEDDING_PROVIDER"] = "local"
    if config.consolidation:
        environment |= {
            "LLM_BOT_CONSOLIDATION": "true",
            "SESSION_IDLE_SECONDS": "1",
            "LLM_BOT_CONSOLIDATION_SWEEP_S": "0.5",
        }
    return environment


def measure_service(
    stack: Stack,
    config: BenchConfig,
    prefix: str,
    url: str,
    in_flight: int,
    raw: Side,
    progress: Progress,
    label: str,
) -> RunReport:
    bus = Bus(stack.emulator, prefix, worker_environment(stack, config, url, in_flight))
    backlog = bench_events(prefix, config.events, config.users, config.threads, bus.egress_topic)
    closed = bench_events(
        f"{prefix}-l",
        latency_events(config.events, in_flight),
        config.users,
        config.threads,
        bus.egress_topic,
    )
    try:
        deadlocks_before = deadlocks([url])
        xid_before = current_xid(url)
        drive = drive_workers(stack, bus, config, Load(backlog, closed, in_flight), progress, label)
        xid_after = current_xid(url)
        deadlocked = deadlocks([url]) - deadlocks_before  # the workers' sessions have ended
        jobs = consolidation_jobs(url)
    finally:
        bus.close()
    progress(
        f"{label}, service: {drive.events_per_s:.1f} events/s "
        f"({drive.events_per_s / raw.events_per_s:.1%} of raw)"
    )
    total = len(backlog) + len(closed)
    requests = stack.model.requests
    service = Side(drive.events_per_s, *percentiles_ms(drive.latencies_ms))
    beyond_p50, beyond_p95, _ = drive.beyond_model_ms(stack.model.latency_ms)
    return RunReport(
        model_latency_ms=stack.model.latency_ms,
        in_flight=in_flight,
        workers=config.workers,
        embeddings=config.embeddings,
        events=len(backlog),
        latency_events=len(closed),
        service=service,
        raw=raw,
        ratio=service.events_per_s / raw.events_per_s,
        # Less the one id our own second reading takes.
        write_transactions_per_event=(xid_after - xid_before - 1) / total,
        model_calls_per_event=sum(r.path == CHAT_PATH for r in requests) / total,
        embedding_calls_per_event=sum(r.path == EMBEDDINGS_PATH for r in requests) / total,
        worker_peak_rss_mb=drive.peak_rss_mb,
        worker_counts=drive.counts,
        worker_cpu_ms_per_event=drive.cpu_s * 1000 / total,
        beyond_model_p50_ms=beyond_p50,
        beyond_model_p95_ms=beyond_p95,
        worker_beyond_model_ms=in_flight * 1000 / drive.events_per_s - stack.model.latency_ms,
        worker_ready_s=drive.ready_s,
        deadlocks=deadlocked,
        consolidation=config.consolidation,
        consolidation_jobs=jobs,
        cpu_by_stage=drive.stages,
    )


@dataclass(frozen=True)
class Load:
    """What one run of the workers is given: a backlog published at once, then events kept
    ``in_flight`` at a time for the closed-loop latency. A warm-up, if any, goes first and
    is in no figure: a new worker's connections start with empty caches on the server."""

    backlog: list[Outgoing]
    closed: list[Outgoing]
    in_flight: int
    warmup: list[Outgoing] = field(default_factory=list)

    @property
    def events(self) -> int:
        """The measured events (the warm-up's are not)."""
        return len(self.backlog) + len(self.closed)


@dataclass(frozen=True)
class Drive:
    """What the workers did with a :class:`Load`, from ready to stop."""

    events_per_s: float  # the backlog's drain rate
    latencies_ms: list[float]  # closed loop
    cpu_s: float  # the workers' CPU, summed
    stages: list[StageCpu]  # the workers' CPU per event over the backlog by stage; [] unprofiled
    peak_rss_mb: float  # the largest of the workers'
    counts: dict[str, int]  # summed over the workers, from their /metrics
    ready_s: float  # launch to /ready answering 200, the slowest worker

    def beyond_model_ms(self, model_latency_ms: float) -> tuple[float, float, float]:
        """p50, p95, p99 of the closed-loop latency less the model server's delay."""
        return percentiles_ms([v - model_latency_ms for v in self.latencies_ms])


def drive_workers(
    stack: Stack,
    bus: Bus,
    config: BenchConfig,
    load: Load,
    progress: Progress,
    label: str,
    on_ready: Callable[[], None] = lambda: None,
) -> Drive:
    """Start ``config.workers`` ``llm-bot run`` children on ``bus``, drain the backlog, run the
    closed loop, and stop them (SIGTERM, as Cloud Run does): on return no worker holds a
    connection. ``on_ready`` runs once every worker is ready and warmed up, before the backlog
    is published."""
    tap = Arrivals(
        bus.clients.subscriber,
        bus.topology.output_subscriptions[bus.egress_topic],
        EGRESS_TAP_MAX_MESSAGES,
    )
    workers = [
        WorkerProcess(bus.worker_environment(), stack.logs / f"{bus.prefix}-worker{n}.log")
        for n in range(config.workers)
    ]
    try:
        tap.start()
        ready_s = max(timed_start(worker) for worker in workers)
        if load.warmup:
            publish_all(bus.clients.publisher, bus.topology.input_topic, load.warmup)
            warmup = [e.correlation_id for e in load.warmup]
            tap.wait_for(warmup, config.timeout_s, progress, f"{label}, warm-up")
        on_ready()
        cpu_before = sum(cpu_seconds(worker.process.pid) for worker in workers)
        pids = [worker.process.pid for worker in workers]
        with profiling(config, pids, bus.prefix) as profile:
            # Published once every worker listens: the emulator hands a backlog that is
            # already there to the first stream that connects, whatever its flow control asks.
            publish_all(bus.clients.publisher, bus.topology.input_topic, load.backlog)
            ids = [e.correlation_id for e in load.backlog]
            tap.wait_for(ids, config.timeout_s, progress, f"{label}, service backlog")
        rate = drain_rate([tap.times[i] for i in ids])
        latencies = closed_loop_latencies_ms(
            bus.clients.publisher,
            bus.topology.input_topic,
            load.closed,
            tap,
            load.in_flight,
            config.timeout_s,
            progress,
        )
        counts = settled_counts(workers, config.timeout_s)
        peak_rss_mb = max(peak_rss_kb(worker.process.pid) for worker in workers) / 1024
        cpu_s = sum(cpu_seconds(worker.process.pid) for worker in workers) - cpu_before
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(60)
    finally:
        for worker in workers:
            worker.kill()
        tap.stop()
    stages = profile.breakdown(len(load.backlog)) if profile else []
    return Drive(rate, latencies, cpu_s, stages, peak_rss_mb, counts, ready_s)


@contextlib.contextmanager
def profiling(config: BenchConfig, pids: list[int], name: str) -> Iterator[Profile | None]:
    """The workers profiled within the block when the config asks for it."""
    if config.profile is None:
        yield None
        return
    with profiled(pids, config.profile, name) as profile:
        yield profile


def timed_start(worker: WorkerProcess) -> float:
    """Seconds from launching ``llm-bot run`` to its ``/ready`` answering 200."""
    began = time.monotonic()
    worker.start(ready_timeout_s=120)
    return time.monotonic() - began


def drain_rate(arrivals: list[float]) -> float:
    """Events/s between the first and the last arrival: the consumer's start-up (and, with
    several workers, their staggered starts) is not part of its throughput."""
    return (len(arrivals) - 1) / (max(arrivals) - min(arrivals))


def consolidation_jobs(url: str) -> int:
    """The consolidation jobs done, as the processed-events ledger records them."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM processed_events WHERE step_key = %s AND published", (JOB_STEP,)
        ).fetchone()
    return 0 if row is None else int(row[0])


def current_xid(url: str) -> int:
    """The next transaction id to be assigned; every write transaction takes one."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    if row is None:
        raise RuntimeError("pg_current_xact_id() returned no row")
    return int(row[0])


def settled_counts(workers: list[WorkerProcess], timeout_s: float) -> dict[str, int]:
    """The workers' counts from their ``/metrics``, summed, once none holds an event (an
    event's ack comes just after the answer the benchmark waited for). A published mark waits
    up to half a second for a coming transaction, so ``transactions`` and ``committed`` may
    not hold the last few."""
    deadline = time.monotonic() + timeout_s
    while any(sum(metric_samples(w.port, IN_FLIGHT).values()) for w in workers):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the workers still held events after {timeout_s}s")
        time.sleep(POLL_S)
    return dict(sum((Counter(worker_counts(w.port)) for w in workers), Counter()))
