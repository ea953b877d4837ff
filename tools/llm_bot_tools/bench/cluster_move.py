"""A Citus cluster that grows and shrinks while a worker answers: ``llm-bot bench citus-move``
and the Citus suite's grow-and-drain test run this one scenario.

A ``llm-bot run`` child answers a steady stream of prompts (DMs and shared channels, from
``users`` users in turn) on a cluster of a coordinator and two workers, with consolidation on
and the local model server scripting every reply. While it answers, the operator's steps of
docs/citus.md run against the coordinator: a third worker is added and
``citus_rebalance_start()`` moves shards onto it (watched through
``citus_rebalance_status()``), then ``citus_drain_node()`` moves every shard off the first
worker, ``citus_cleanup_orphaned_resources()`` drops the copies the moves left behind, and the
drained node leaves the metadata. Each move is Citus's default: logical replication, writes
blocked only for the switch-over.

What comes back is what happened, not a verdict: when each event went out and came back (and
how many copies came back), the phases' bounds, the shards and bytes each move carried, what
reached the dead-letter topic and the worker's own counts. The test asserts on it; the bench
reports latency by phase and plots it.
"""

from __future__ import annotations

import json
import signal
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from uuid import uuid4

import psycopg
from google.cloud.pubsub_v1.publisher.futures import Future

from llm_bot.consolidation.extraction import TURNS_HEADER
from llm_bot.db.migrate import migrate
from llm_bot.events.identity import user_id_of
from llm_bot_tools.bench.load import PROGRESS_EVERY_S, Arrivals, Progress, outgoing, percentiles_ms
from llm_bot_tools.bench.service import (
    BENCH_LEASE_EXTENSION_S,
    EGRESS_TAP_MAX_MESSAGES,
    settled_counts,
)
from llm_bot_tools.devstack.worker_harness import Bus, WorkerProcess, model_environment
from llm_bot_tools.local.citus_cluster import LOOPBACK, CitusCluster, CitusNode
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.postgres_build import CLUSTER, build
from llm_bot_tools.local.prompt_events import prompt_event
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator

# What a user says, with a word of their own (``mark``) that an erasure scan looks for.
DM_TEXT = "I keep bees on a roof, mark {mark}, message {index}"
CHANNEL_TEXT = "hello room, mark {mark} here, message {index}"
# Every consolidation's reply: a fact in the words of a DM's first turn (seq 1), which the
# grounding keeps for that DM's user and drops anywhere else, and a summary.
EXTRACTION = json.dumps(
    {"facts": [{"text": "Keeps bees on a roof", "sources": [1]}], "summary": "A session."}
)
# A statement failed by a move's switch-over is retried, never dead-lettered for it: the
# worker's limit and its subscription's (the bus's ``max_delivery_attempts``) are this.
MAX_DELIVERY_ATTEMPTS = 100
WORKER_SETTINGS = {
    "LLM_BOT_CONSOLIDATION": "true",
    "SESSION_IDLE_SECONDS": "2",
    "LLM_BOT_CONSOLIDATION_SWEEP_S": "1",
    "LLM_BOT_MAX_DELIVERY_ATTEMPTS": str(MAX_DELIVERY_ATTEMPTS),
    # Production's timeouts: queueing behind a move is what is measured.
    "OPENAI_TIMEOUT_MS": "30000",
    "LLM_BOT_MODEL_DEADLINE_MS": "60000",
    # The emulator's redeliveries of what waits unread in the client (bench/service.py).
    "LLM_BOT_LEASE_EXTENSION_S": str(BENCH_LEASE_EXTENSION_S),
}
# Citus moves a shard without blocking its writes by logical replication.
CLUSTER_SETTINGS = {"wal_level": "logical"}
# The table whose shard placement stands for a user's (every user table is colocated with it).
USER_TABLE = "conversation_turns"
REBALANCE_POLL_S = 0.5
BEFORE, REBALANCE, DRAIN, AFTER = "before", "rebalance", "drain", "after"


@dataclass(frozen=True)
class MoveConfig:
    users: int = 2000
    channels: int = 20
    rate_per_s: float = 20.0  # events published a second, steadily
    settle_s: float = 10.0  # traffic before the first move, and after the last at least
    model_latency_ms: float = 200.0
    shard_count: int = 8  # of each distributed table
    timeout_s: float = 600.0


@dataclass(frozen=True)
class Phase:
    name: str
    began: float  # time.time()
    ended: float


@dataclass(frozen=True)
class Move:
    """One operation's shard moves: how many shards, their bytes (sizes before), how long."""

    name: str
    shards: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class MoveRun:
    """What happened in one run (the module's docstring)."""

    sent: dict[str, float]  # correlation id -> publish time
    marks: dict[str, str]  # user id -> the word of theirs in every text they sent
    dm_users: list[str]  # user ids that sent a DM, in the order they first did
    arrived: dict[str, float]  # correlation id -> first arrival on the egress topic
    copies: dict[str, int]  # correlation id -> distinct egress messages carrying it
    dead_letters: list[str]  # correlation ids (or message ids) on the dead-letter topic
    phases: list[Phase]
    moves: list[Move]
    counts: dict[str, int]  # the worker's (WorkerStats)
    drained: CitusNode  # out of the cluster, still running: a scan reaches what it kept
    moved_users: list[str]  # DM users whose shard is on another node after the moves

    def beyond_model_ms(self, model_latency_ms: float, phases: Iterable[Phase]) -> list[float]:
        """Latency less the model's delay of the events published within ``phases``."""
        bounds = [(p.began, p.ended) for p in phases]
        return [
            (self.arrived[cid] - at) * 1000 - model_latency_ms
            for cid, at in self.sent.items()
            if cid in self.arrived and any(began <= at < ended for began, ended in bounds)
        ]


@dataclass(frozen=True)
class MoveReport:
    """The bench's figures of a run."""

    events: int
    users: int
    rate_per_s: float
    model_latency_ms: float
    by_phase: dict[str, dict[str, float]]  # events, p50_ms, p95_ms beyond the model
    moving_over_before_p50: float  # rebalance and drain together, against before
    moving_over_before_p95: float
    moves: list[dict[str, float | str]]  # with shards and MB a minute
    retried: int  # deliveries handed back for redelivery (the worker's nacked)
    dead_letters: int
    duplicated: int
    lost: int
    counts: dict[str, int]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def report(run: MoveRun, config: MoveConfig) -> MoveReport:
    def figures(phases: list[Phase]) -> dict[str, float]:
        values = run.beyond_model_ms(config.model_latency_ms, phases)
        p50, p95, _ = percentiles_ms(values)
        return {"events": len(values), "p50_ms": p50, "p95_ms": p95}

    by_phase = {phase.name: figures([phase]) for phase in run.phases}
    moving = figures([p for p in run.phases if p.name in (REBALANCE, DRAIN)])
    before = by_phase[BEFORE]
    return MoveReport(
        events=len(run.sent),
        users=len(run.marks),
        rate_per_s=config.rate_per_s,
        model_latency_ms=config.model_latency_ms,
        by_phase=by_phase,
        moving_over_before_p50=moving["p50_ms"] / before["p50_ms"],
        moving_over_before_p95=moving["p95_ms"] / before["p95_ms"],
        moves=[
            asdict(m)
            | {"shards_per_minute": m.shards * 60 / m.seconds}
            | {"mb_per_minute": m.bytes / 1e6 * 60 / m.seconds}
            for m in run.moves
        ],
        retried=run.counts.get("nacked", 0),
        dead_letters=len(run.dead_letters),
        duplicated=sum(1 for n in run.copies.values() if n > 1),
        lost=len(run.sent.keys() - run.arrived.keys()),
        counts=run.counts,
    )


def grow_and_drain(
    cluster: CitusCluster,
    database_url: str,
    bus: Bus,
    model: LocalModelServer,
    config: MoveConfig,
    log_dir: Path,
    progress: Progress,
) -> MoveRun:
    """The scenario (the module's docstring) on ``cluster``, of a coordinator and two workers,
    whose database at ``database_url`` is migrated; the worker's settings beyond
    :data:`WORKER_SETTINGS` are ``bus``'s, its log in ``log_dir``."""
    model.latency_ms = config.model_latency_ms
    model.reply_to_prefix(TURNS_HEADER, EXTRACTION)
    subscriptions = bus.topology.output_subscriptions
    egress = Arrivals(
        bus.clients.subscriber, subscriptions[bus.egress_topic], EGRESS_TAP_MAX_MESSAGES
    )
    dead = Arrivals(
        bus.clients.subscriber, bus.topology.deadletter_subscription, EGRESS_TAP_MAX_MESSAGES
    )
    worker = WorkerProcess(
        bus.worker_environment(**WORKER_SETTINGS), log_dir / f"{bus.prefix}-worker.log"
    )
    stream = _Stream(bus, config)
    phases: list[Phase] = []
    try:
        egress.start()
        dead.start()
        worker.start(ready_timeout_s=120)
        stream.start()
        phases.append(_traffic(BEFORE, config.settle_s, 0, stream, progress))
        sample = stream.dm_users[:50]
        nodes_before = _nodes_of(database_url, sample)
        # Its own machine in production: its start is no part of the move on this one.
        added = cluster.start_worker()
        began = time.time()
        cluster.add_worker(added)
        moves = [_rebalance(database_url, config.timeout_s, progress)]
        phases.append(Phase(REBALANCE, began, time.time()))
        began = time.time()
        drained = cluster.workers[0]
        moves.append(_drain(database_url, drained, config.timeout_s, progress))
        cluster.remove_worker(drained)
        phases.append(Phase(DRAIN, began, time.time()))
        nodes_after = _nodes_of(database_url, sample)
        phases.append(_traffic(AFTER, config.settle_s, config.users, stream, progress))
        stream.stop()
        egress.wait_for(stream.sent, config.timeout_s, progress, "answers")
        counts = settled_counts([worker], config.timeout_s)
        worker.signal(signal.SIGTERM)
        worker.wait(60)
    finally:
        stream.stop()
        worker.kill()
        egress.stop()
        dead.stop()
    return MoveRun(
        sent=dict(stream.sent),
        marks=dict(stream.marks),
        dm_users=list(stream.dm_users),
        arrived=dict(egress.times),
        copies={cid: len(ids) for cid, ids in egress.message_ids.items()},
        dead_letters=sorted(dead.times),
        phases=phases,
        moves=moves,
        counts=counts,
        drained=drained,
        moved_users=[u for u in sample if nodes_before[u] != nodes_after[u]],
    )


class _Stream:
    """Prompts published at a steady rate on a thread of its own until stopped: user ``n`` of
    ``users`` in turn, in a DM when ``n`` is even, else in one of the shared channels."""

    def __init__(self, bus: Bus, config: MoveConfig) -> None:
        self._bus = bus
        self._config = config
        self.sent: dict[str, float] = {}
        self.marks: dict[str, str] = {}
        self.dm_users: list[str] = []
        self._futures: list[Future] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._publish, name="stream", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        for future in self._futures:
            future.result(timeout=60)
        self._futures.clear()

    def time_to(self, events: int) -> float:
        """Seconds until ``events`` will have gone out at the stream's rate."""
        return (events - len(self.sent)) / self._config.rate_per_s

    def _publish(self) -> None:
        interval, index = 1 / self._config.rate_per_s, 0
        next_at = time.monotonic()
        # The wait paces the stream: it ends early only when the stream is stopped.
        while not self._stopping.wait(max(0.0, next_at - time.monotonic())):
            number = index % self._config.users
            user, mark = f"{self._bus.prefix}-u{number}", f"zq{number}x{self._bus.prefix[-6:]}"
            in_dm = number % 2 == 0
            channel = "desk" if in_dm else f"room-{number % self._config.channels}"
            text = (DM_TEXT if in_dm else CHANNEL_TEXT).format(mark=mark, index=index)
            event = prompt_event(
                text,
                user=user,
                thread=channel,
                egress_topic=self._bus.egress_topic,
                correlation_id=f"{self._bus.prefix}-{index}",
            )
            if in_dm:
                event.egress.type = "dm"
            user_id = user_id_of(event)
            if user_id not in self.marks:
                self.marks[user_id] = mark
                if in_dm:
                    self.dm_users.append(user_id)
            message = outgoing(event)
            self.sent[message.correlation_id] = time.time()
            self._futures.append(
                self._bus.clients.publisher.publish(
                    self._bus.topology.input_topic, message.data, **message.attributes
                )
            )
            index += 1
            next_at += interval


def _traffic(name: str, seconds: float, events: int, stream: _Stream, progress: Progress) -> Phase:
    """The stream running on its own for ``seconds``, and on until ``events`` went out."""
    began = time.time()
    while (left := max(began + seconds - time.time(), stream.time_to(events))) > 0:
        progress(f"{name}: {len(stream.sent)} events published")
        time.sleep(min(PROGRESS_EVERY_S, left))
    return Phase(name, began, time.time())


def _placements(url: str) -> dict[int, tuple[int, int]]:
    """Each shard's node port and size in bytes."""
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT shardid, nodeport, shard_size FROM citus_shards"
            " WHERE citus_table_type = 'distributed'"
        ).fetchall()
    return {int(shard): (int(port), int(size)) for shard, port, size in rows}


def _moved(name: str, before: dict[int, tuple[int, int]], url: str, began: float) -> Move:
    after = _placements(url)
    moved = [shard for shard, (port, _) in before.items() if after[shard][0] != port]
    return Move(name, len(moved), sum(before[s][1] for s in moved), time.monotonic() - began)


def _rebalance(url: str, timeout_s: float, progress: Progress) -> Move:
    """``citus_rebalance_start()``, watched until it ends; raises if it did not finish, or
    has not within ``timeout_s``."""
    before, began = _placements(url), time.monotonic()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT citus_rebalance_start()")
        reported = None
        while True:
            row = connection.execute(
                "SELECT state, details FROM citus_rebalance_status() ORDER BY job_id DESC LIMIT 1"
            ).fetchone()
            state, details = (row[0], row[1]) if row else ("finished", {})
            if state in ("finished", "failed", "cancelled"):
                break
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"the rebalance still {state} after {timeout_s:g} s: {details}")
            tasks = details.get("task_state_counts", {})
            if tasks != reported:
                progress(f"rebalance: {state}, tasks {tasks}")
                reported = tasks
            time.sleep(REBALANCE_POLL_S)
    if state != "finished":
        raise RuntimeError(f"the rebalance ended {state}: {details}")
    return _moved(REBALANCE, before, url, began)


def _drain(url: str, node: CitusNode, timeout_s: float, progress: Progress) -> Move:
    """Every shard off ``node``, then the copies the moves left behind dropped; each statement
    within ``timeout_s``."""
    before, began = _placements(url), time.monotonic()
    progress(f"drain: {node.name}")
    bound = f"-c statement_timeout={int(timeout_s * 1000)}"
    with psycopg.connect(url, autocommit=True, options=bound) as connection:
        connection.execute("SELECT citus_drain_node(%s, %s)", (LOOPBACK, node.port))
        connection.execute("CALL citus_cleanup_orphaned_resources()")
    return _moved(DRAIN, before, url, began)


def _nodes_of(url: str, users: list[str]) -> dict[str, int]:
    """The port of the node holding each user's shard."""
    with psycopg.connect(url, autocommit=True) as connection:
        return {
            user: int(row[0])
            for user in users
            if (
                row := connection.execute(
                    "SELECT nodeport FROM citus_shards"
                    " WHERE shardid = get_shard_id_for_distribution_column(%s, %s::text)",
                    (USER_TABLE, user),
                ).fetchone()
            )
        }


def run_cluster_move(
    data_dir: Path, config: MoveConfig, progress: Progress
) -> tuple[MoveRun, MoveReport]:
    """The scenario on a local stack of its own: the Pub/Sub emulator, the local model server
    and a cluster (Citus built first if it is not), under ``data_dir``, removed afterwards."""
    install = build(CLUSTER, progress)
    data_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"m{uuid4().hex[:10]}"
    with (
        tempfile.TemporaryDirectory(dir=data_dir, prefix="citus-move-") as base,
        PubSubEmulator(Path(base) / "pubsub") as emulator,
        LocalModelServer() as model,
        CitusCluster(
            install,
            Path(base) / "cluster",
            shard_count=config.shard_count,
            settings=CLUSTER_SETTINGS,
        ) as cluster,
    ):
        url = cluster.create_database(prefix)
        migrate(url)
        environment = {"DATABASE_URL": url, **model_environment(model)}
        bus = Bus(emulator, prefix, environment, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS)
        try:
            run = grow_and_drain(cluster, url, bus, model, config, Path(base), progress)
        finally:
            bus.close()
    return run, report(run, config)
