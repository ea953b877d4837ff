"""The group committer on a local Citus cluster, with and without its split by node: write
transactions, two-phase commits and database CPU per event, and the latency of a commit.

Each simulated event does what a worker's does to the database, through one committer: a claim
(one row inserted) and, after a stand-in for the model's time, its output (that row updated
and two history rows inserted), every statement naming the event's user, a random one of many.
A ``--shared`` fraction of the events are in one of a few shared channels: their output also
moves the channel's counter, on the channel's shard (two tenants, as a shared channel's event).
``--concurrency`` events are in flight at once, as in a worker. The same load runs in turns,
``--rounds`` times each, on one cluster (a coordinator and two workers, started here):
``whole`` commits each batch as one transaction, as on plain PostgreSQL; ``by node`` splits
it by the shard map (:mod:`llm_bot.db.placements`). Prepared transactions (a two-phase commit
prepares one on each worker it writes) are counted in the coordinator's
``pg_dist_transaction``, whose recovery (which empties it) is off for the run. The database's
CPU is that of every node's server processes (it moves less with the other load on a shared
machine than latency does). The nodes write durably (``fsync`` on, unlike the tests' cluster),
as a deployment's would: a prepare is a flush of its own.

    python -m llm_bot_tools.bench.citus_commit --events 2000 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.batches import UserRows, Work
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.placements import Placements
from llm_bot_tools.bench.load import percentiles_ms
from llm_bot_tools.bench.procfs import server_cpu_seconds
from llm_bot_tools.local.citus_cluster import CitusCluster
from llm_bot_tools.local.postgres_build import CLUSTER, find_install, unavailable_reason

DATABASE = "bench"
USERS = 10_000
CHANNELS = 20
MAX_BATCH = 32  # the worker's defaults (llm_bot/settings.py)
MAX_DELAY_S = 0.02
SCHEMA = (
    "CREATE TABLE bench_events (user_id text, id bigint, stored boolean NOT NULL DEFAULT false,"
    " PRIMARY KEY (user_id, id))",
    "CREATE TABLE bench_turns (user_id text, id bigint, seq int, content text,"
    " PRIMARY KEY (user_id, id, seq))",
    "SELECT create_distributed_table('bench_events', 'user_id')",
    "CREATE TABLE bench_channels (channel text PRIMARY KEY, last_seq bigint NOT NULL)",
    "SELECT create_distributed_table('bench_turns', 'user_id', colocate_with => 'bench_events')",
    "SELECT create_distributed_table('bench_channels', 'channel', colocate_with => 'bench_events')",
    f"INSERT INTO bench_channels SELECT 'channel-' || n, 0 FROM generate_series(1, {CHANNELS}) n",  # noqa: S608 (a constant)
)


@dataclass(frozen=True)
class Load:
    events: int
    concurrency: int
    model_s: float
    shared: float  # the fraction of events in a shared channel


@dataclass(frozen=True)
class CommitReport:
    mode: str
    events: int
    events_per_s: float
    transactions_per_event: float
    prepares_per_event: float
    database_cpu_ms_per_event: float  # the coordinator's and the workers' processes
    commit_p50_ms: float
    commit_p95_ms: float
    commit_p99_ms: float


def claim(user: str, event: int) -> Work:
    async def work(connection: AsyncConnection[Any]) -> None:
        await connection.execute("INSERT INTO bench_events VALUES (%s, %s)", (user, event))

    return work


def store(user: str, event: int, channel: str | None) -> Work:
    async def work(connection: AsyncConnection[Any]) -> None:
        await connection.execute(
            "UPDATE bench_events SET stored = true WHERE user_id = %s AND id = %s", (user, event)
        )
        if channel is not None:
            await connection.execute(
                "UPDATE bench_channels SET last_seq = last_seq + 1 WHERE channel = %s", (channel,)
            )
        for seq in (1, 2):
            await connection.execute(
                "INSERT INTO bench_turns VALUES (%s, %s, %s, 'a turn')", (user, event, seq)
            )

    return work


async def prepared_transactions(pool: AsyncConnectionPool[Any]) -> int:
    async with pool.connection() as connection:
        row = await (
            await connection.execute("SELECT count(*) FROM pg_dist_transaction")
        ).fetchone()
    return int(row[0]) if row else 0


def cluster_cpu_s(cluster: CitusCluster) -> float:
    """The CPU time every node's server has used so far (the bench's cluster is its own)."""
    pids = (
        int((node.data_dir / "postmaster.pid").read_text().split()[0]) for node in cluster.nodes
    )
    return sum(server_cpu_seconds(pid) for pid in pids)


async def run_mode(cluster: CitusCluster, mode: str, load: Load, first_id: int) -> CommitReport:
    timings: list[float] = []
    async with AsyncConnectionPool(
        cluster.url_for(DATABASE), min_size=4, max_size=8, kwargs={"autocommit": True}
    ) as pool:
        placements = Placements("bench_events") if mode == "by node" else None
        committer = GroupCommitter(
            pool, max_batch=MAX_BATCH, max_delay_s=MAX_DELAY_S, placements=placements
        )
        before = await prepared_transactions(pool)
        cpu_before = cluster_cpu_s(cluster)
        rng = random.Random(first_id)  # noqa: S311 - which user, not a secret
        ids = iter(range(first_id, first_id + load.events))

        async def commit(work: Work, tenants: tuple[str, ...]) -> None:
            began = time.perf_counter()
            await committer.commit(work, [UserRows("bench", tenant) for tenant in tenants])
            timings.append((time.perf_counter() - began) * 1000)

        async def events_in_turn() -> None:
            for event in ids:
                user = f"user-{rng.randrange(USERS)}"
                channel = None
                if rng.random() < load.shared:
                    channel = f"channel-{rng.randrange(CHANNELS) + 1}"
                with committer.expecting_work():
                    await commit(claim(user, event), (user,))
                    await asyncio.sleep(load.model_s)
                    tenants = (user,) if channel is None else (user, channel)
                    await commit(store(user, event, channel), tenants)

        async with committer:
            began = time.perf_counter()
            await asyncio.gather(*(events_in_turn() for _ in range(load.concurrency)))
            elapsed = time.perf_counter() - began
        cpu_s = cluster_cpu_s(cluster) - cpu_before
        prepared = await prepared_transactions(pool) - before
    p50, p95, p99 = percentiles_ms(timings)
    return CommitReport(
        mode,
        load.events,
        round(load.events / elapsed, 1),
        round(committer.transactions / load.events, 3),
        round(prepared / load.events, 3),
        round(cpu_s * 1000 / load.events, 2),
        round(p50, 2),
        round(p95, 2),
        round(p99, 2),
    )


def prepare(cluster: CitusCluster) -> None:
    """The bench's database, its tables distributed, every node durable."""
    url = cluster.create_database(DATABASE)
    for node in cluster.nodes:
        with psycopg.connect(node.url_for(DATABASE), autocommit=True) as conn:
            for setting in (
                "fsync = on",
                "full_page_writes = on",
                "citus.recover_2pc_interval = -1",
            ):
                conn.execute(f"ALTER SYSTEM SET {setting}")
            conn.execute("SELECT pg_reload_conf()")
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000, help="events per mode")
    parser.add_argument("--concurrency", type=int, default=32, help="events in flight")
    parser.add_argument("--model-ms", type=float, default=50.0, help="a model call's time")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each mode, alternating")
    parser.add_argument("--shared", type=float, default=0.0, help="events in shared channels")
    args = parser.parse_args(argv)
    install = find_install(CLUSTER)
    if install is None:
        print(unavailable_reason(CLUSTER) or "Citus is not built: run make citus", file=sys.stderr)
        return 1
    with (
        tempfile.TemporaryDirectory(prefix="citus-commit-") as base,
        CitusCluster(install, Path(base)) as cluster,
    ):
        prepare(cluster)
        load = Load(args.events, args.concurrency, args.model_ms / 1000, args.shared)
        modes = ("whole", "by node") * args.rounds
        reports = [
            asyncio.run(run_mode(cluster, mode, load, n * 10**9)) for n, mode in enumerate(modes)
        ]
    for report in reports:
        print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
