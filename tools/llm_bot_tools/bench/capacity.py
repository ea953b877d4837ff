"""``llm-bot bench capacity``: what an event costs the database and what a row costs its disk,
the measured figures of the capacity model (docs/performance.md, "Capacity").

The worker runs as ``llm-bot run`` children against the local stack, as in ``bench run``
(:func:`~llm_bot_tools.bench.service.drive_workers`), at each embedding size asked for, on
three kinds of event, each a warm-up, a backlog and a closed loop, for users whose earlier
turns (``history_turns`` each) were loaded first (:mod:`~llm_bot_tools.bench.fill`):

- ``dm``: a returning user's message in a direct conversation (one tenant);
- ``shared``: a message in a shared channel, ten channels shared by the users;
- ``memory``: a direct message whose model saves a new memory (``upsertMemory``), then answers.

For each, the server's side (:mod:`~llm_bot_tools.bench.dbserver`): its processes' CPU, the
database's active time, the WAL written and the pages read per event, and, in a separate
smaller run with every statement logged, the statements that take that time. Afterwards, on
the same database, each table's bytes per row (:mod:`~llm_bot_tools.bench.storage`),
``tool_calls`` filled through the ledger.

With ``citus`` the same events also run against a local Citus cluster (a coordinator and two
workers, :mod:`llm_bot_tools.local.citus_cluster`, built by ``make citus`` or here), migrated
by ``llm-bot migrate`` as an operator would: the cost of the cluster against one node for the
same load. Its nodes write durably (``fsync``, full-page writes), as the embedded server does.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from uuid import uuid4

import psycopg

from llm_bot.db.migrate import migrate
from llm_bot.memory.tools import UPSERT_MEMORY
from llm_bot_tools.bench import dbserver, fill, storage
from llm_bot_tools.bench.dbserver import ServerNode, StatementCost
from llm_bot_tools.bench.load import TEXT, Outgoing, Progress, outgoing
from llm_bot_tools.bench.service import (
    BenchConfig,
    Drive,
    Load,
    Stack,
    bench_stack,
    drive_workers,
    latency_events,
    worker_environment,
)
from llm_bot_tools.devstack.worker_harness import Bus
from llm_bot_tools.local.citus_cluster import CitusCluster
from llm_bot_tools.local.postgres_build import CLUSTER, build
from llm_bot_tools.local.prompt_events import prompt_event

KINDS = ("dm", "shared", "memory")
ROOMS = 10
TOP_STATEMENTS = 8
# Warm-up events per in-flight slot: enough for every pooled connection to have run each
# statement a few times before anything is measured.
WARM_UP = 4
DURABLE = {"fsync": "on", "full_page_writes": "on"}


@dataclass(frozen=True)
class CapacityConfig:
    events: int  # per kind, dimension and target
    statement_events: int  # per kind, in the run with every statement logged
    users: int
    in_flight: int
    model_latency_ms: float
    dimensions: list[int]
    tool_calls: int
    history_turns: int  # per user, loaded before the events
    data_dir: Path
    citus: bool
    timeout_s: float = 900.0


@dataclass(frozen=True)
class KindReport:
    target: str  # "postgres" (one node) or "citus" (a coordinator and two workers)
    dimensions: int
    kind: str
    events: int  # backlog and closed loop
    events_per_s: float  # the backlog's drain rate
    beyond_model_p50_ms: float  # closed loop, less the model's delay
    beyond_model_p95_ms: float
    db_cpu_ms_per_event: float  # the servers' processes (every node), from /proc
    db_active_ms_per_event: float  # pg_stat_database.active_time (every node)
    wal_bytes_per_event: float  # every node
    pages_per_event: float  # 8 kB page accesses, shared buffer hits or not (every node)
    worker_cpu_ms_per_event: float
    # Tables `llm-bot migrate` made distributed or reference ones (0 on one node).
    distributed_tables: int = 0
    statements: list[StatementCost] = field(default_factory=list)  # one node only

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"statements": [s.as_dict() for s in self.statements]}


@dataclass(frozen=True)
class StorageReport:
    dimensions: int
    events: int  # every event the database took, the logged runs' included
    users: int
    rows: list[storage.RowCost]

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"rows": [r.as_dict() for r in self.rows]}


@dataclass(frozen=True)
class CapacityReport:
    started: str  # UTC
    load_before: tuple[float, float, float]  # os.getloadavg()
    load_after: tuple[float, float, float]
    cpus: int
    kinds: list[KindReport]
    storage: list[StorageReport]

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {
            "kinds": [k.as_dict() for k in self.kinds],
            "storage": [s.as_dict() for s in self.storage],
        }


@dataclass(frozen=True)
class Target:
    """A database server the worker is pointed at: one node, or a Citus coordinator."""

    name: str
    nodes: list[ServerNode]
    create_database: Callable[[str], str]
    drop_database: Callable[[str], None]


def run_capacity(config: CapacityConfig, progress: Progress) -> CapacityReport:
    started, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    kinds: list[KindReport] = []
    sizes: list[StorageReport] = []
    with bench_stack(config.data_dir) as stack:
        stack.model.latency_ms = config.model_latency_ms
        postgres = stack.postgres
        node = ServerNode(postgres.url, postgres.postmaster_pid, postgres.data_dir / "log")
        one = Target("postgres", [node], postgres.create_database, postgres.drop_database)
        for dimensions in config.dimensions:
            with Database(stack, one, dimensions, config, progress) as database:
                before = storage.table_sizes(database.url)
                kinds += database.log_statements(database.measure_kinds())
                fill.fill_tool_calls(
                    database.url, config.tool_calls, config.users, database.name, progress
                )
                rows = storage.row_costs(before, storage.table_sizes(database.url))
                sizes.append(StorageReport(dimensions, database.events, config.users, rows))
        if config.citus:
            with citus_target(config.data_dir, progress) as cluster:
                for dimensions in config.dimensions:
                    with Database(stack, cluster, dimensions, config, progress) as database:
                        kinds += database.measure_kinds()
    return CapacityReport(started, load_before, os.getloadavg(), os.cpu_count() or 0, kinds, sizes)


@contextlib.contextmanager
def citus_target(data_dir: Path, progress: Progress) -> Iterator[Target]:
    """A coordinator and two workers in a directory under ``data_dir``, writing durably;
    removed with their data at the end."""
    install = build(CLUSTER, progress)
    data_dir.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(dir=data_dir, prefix="citus-") as base,
        CitusCluster(install, Path(base)) as cluster,
    ):
        for node in cluster.nodes:
            with psycopg.connect(node.url_for("postgres"), autocommit=True) as connection:
                for name, value in DURABLE.items():
                    connection.execute(f"ALTER SYSTEM SET {name} = {value}")
                connection.execute("SELECT pg_reload_conf()")
        nodes = [
            ServerNode(
                node.url_for("postgres"), dbserver.postmaster_pid(node.data_dir), node.log_path
            )
            for node in cluster.nodes
        ]
        progress(f"citus: a coordinator and {len(cluster.workers)} workers under {base}")
        yield Target("citus", nodes, cluster.create_database, cluster.drop_database)


@dataclass(frozen=True)
class KindRun:
    load: Load
    drive: Drive
    server: dbserver.Reading  # from the end of the warm-up to the end of its connections
    log_offset: int  # the coordinator's log at the end of the warm-up


class Database:
    """A fresh database on ``target``, migrated by ``llm-bot migrate``'s code, each user's
    history loaded, that the kinds' runs share (a user's later events find their earlier
    ones); dropped at the end."""

    def __init__(
        self,
        stack: Stack,
        target: Target,
        dimensions: int,
        config: CapacityConfig,
        progress: Progress,
    ) -> None:
        self.stack, self.target, self.dimensions = stack, target, dimensions
        self.config, self.progress = config, progress
        self.name = f"cap{uuid4().hex[:10]}"
        self.url = ""
        self.events = 0  # every event run on it so far
        self.distributed = 0  # tables in Citus's metadata after the migration

    def __enter__(self) -> Database:
        self.url = self.target.create_database(self.name)
        config = self.config
        try:
            migrate(self.url)
            if self.target.name == "citus":
                self.distributed = distributed_tables(self.url)
                self.progress(f"citus: {self.distributed} tables distributed or reference")
            if config.history_turns:
                fill.fill_history(
                    self.url, config.users, config.history_turns, self.dimensions, self.progress
                )
        except BaseException:
            self.target.drop_database(self.name)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.target.drop_database(self.name)

    def measure_kinds(self) -> list[KindReport]:
        reports = []
        for kind in KINDS:
            label = f"{self.target.name}, {self.dimensions} dimensions, {kind}"
            run = self.run_kind(kind, self.config.events, label)
            report = kind_report(self.target, self.dimensions, kind, run, self.config)
            reports.append(replace(report, distributed_tables=self.distributed))
            self.progress(summary(label, reports[-1]))
        return reports

    def log_statements(self, reports: list[KindReport]) -> list[KindReport]:
        """Each kind again, fewer events, every statement logged: the reports with their kind's
        costliest statements (the logged run's CPU, slowed by the logging, is not used)."""
        node = self.target.nodes[0]
        dbserver.log_statements(node, self.name)
        logged = []
        for report in reports:
            label = f"{self.target.name}, {self.dimensions} dimensions, {report.kind}, logged"
            run = self.run_kind(report.kind, self.config.statement_events, label)
            costs = dbserver.statement_costs(node.log_path, run.log_offset, run.load.events)
            logged.append(replace(report, statements=costs[:TOP_STATEMENTS]))
            self.progress(f"{label}: {sum(c.total_ms for c in costs):.2f} ms/event logged")
        return logged

    def run_kind(self, kind: str, events: int, label: str) -> KindRun:
        """``events`` of ``kind`` (and the closed loop's) through a worker of its own on fresh
        topics; the servers read when it is ready and once its connections are gone."""
        config = self.config
        prefix = f"{self.name}-{kind}-{uuid4().hex[:6]}"
        bench = BenchConfig(
            events, config.users, ROOMS, "server", config.data_dir, timeout_s=config.timeout_s
        )
        environment = worker_environment(self.stack, bench, self.url, config.in_flight)
        environment["MEMORY_EMBEDDING_DIMENSIONS"] = str(self.dimensions)
        bus = Bus(self.stack.emulator, prefix, environment)
        closed = latency_events(events, config.in_flight)
        load = Load(
            kind_events(kind, prefix, events, config.users, bus.egress_topic),
            kind_events(kind, f"{prefix}-l", closed, config.users, bus.egress_topic),
            config.in_flight,
            kind_events(
                kind, f"{prefix}-w", WARM_UP * config.in_flight, config.users, bus.egress_topic
            ),
        )
        readings: list[dbserver.Reading] = []
        log_offsets: list[int] = []
        nodes = self.target.nodes

        def ready() -> None:
            log_offsets.append(nodes[0].log_path.stat().st_size)
            readings.append(dbserver.read(nodes, self.name))

        try:
            drive = drive_workers(self.stack, bus, bench, load, self.progress, label, ready)
            dbserver.wait_without_clients(nodes, self.name)
            after = dbserver.read(nodes, self.name)
        finally:
            bus.close()
        self.events += load.events + len(load.warmup)
        return KindRun(load, drive, after - readings[0], log_offsets[0])


def distributed_tables(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute("SELECT count(*) FROM pg_dist_partition").fetchone()
    return int(row[0]) if row else 0


def kind_events(
    kind: str, prefix: str, count: int, users: int, egress_topic: str
) -> list[Outgoing]:
    """``count`` events of ``kind`` spread round-robin over ``users`` (and ``ROOMS`` shared
    channels); a memory event's fact is three new words, so none is a near-duplicate of another
    and each is a new memory."""
    events = []
    for index in range(count):
        user = f"user-{index % users}"
        text = TEXT.format(index=index)
        if kind == "memory":
            words = " ".join(uuid4().hex[start : start + 8] for start in (0, 8, 16))
            fact = json.dumps({"content": f"{user} collects {words}"})
            text = f"[[tool:{UPSERT_MEMORY.name} {fact}]] {text}"
        thread = f"room-{index % ROOMS}" if kind == "shared" else "inbox"
        event = prompt_event(
            text,
            user=user,
            thread=thread,
            egress_topic=egress_topic,
            correlation_id=f"{prefix}-{index}",
        )
        if kind != "shared":
            event.egress.type = "dm"  # a private conversation (llm_bot.events.identity)
        events.append(outgoing(event))
    return events


def kind_report(
    target: Target, dimensions: int, kind: str, run: KindRun, config: CapacityConfig
) -> KindReport:
    events = run.load.events
    beyond_p50, beyond_p95, _ = run.drive.beyond_model_ms(config.model_latency_ms)
    return KindReport(
        target=target.name,
        dimensions=dimensions,
        kind=kind,
        events=events,
        events_per_s=run.drive.events_per_s,
        beyond_model_p50_ms=beyond_p50,
        beyond_model_p95_ms=beyond_p95,
        db_cpu_ms_per_event=run.server.cpu_s * 1000 / events,
        db_active_ms_per_event=run.server.active_ms / events,
        wal_bytes_per_event=run.server.wal_bytes / events,
        pages_per_event=run.server.blocks / events,
        worker_cpu_ms_per_event=run.drive.cpu_s * 1000 / events,
    )


def summary(label: str, report: KindReport) -> str:
    return (
        f"{label}: {report.events_per_s:.1f} events/s, p50 beyond the model "
        f"{report.beyond_model_p50_ms:.0f} ms, database CPU {report.db_cpu_ms_per_event:.2f} "
        f"ms/event (active {report.db_active_ms_per_event:.2f}), WAL "
        f"{report.wal_bytes_per_event / 1024:.1f} kB/event, "
        f"{report.pages_per_event:.0f} page accesses/event"
    )
