"""The cluster grows and shrinks while a worker answers (docs/citus.md, "Adding and draining
nodes"): a third worker is added and the shards rebalanced onto it, then the first worker is
drained and removed, all under a steady stream from 2,000 users in DMs and shared channels with
consolidation on. Nothing is lost, doubled or dead-lettered by the moves; every history stays
whole and in order; the console's read-only role reads the moved shards and writes none; and a
user whose shard moved is erased from every node, the drained one included."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from llm_bot.db.migrate import migrate
from llm_bot.lifecycle.erasure import forget_user
from llm_bot.memory.derived import JOB_STEP
from llm_bot_tools.bench.cluster_move import (
    CLUSTER_SETTINGS,
    MAX_DELIVERY_ATTEMPTS,
    MoveConfig,
    grow_and_drain,
    report,
)
from llm_bot_tools.local.citus_cluster import CitusCluster
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.postgres_build import CLUSTER, find_install, unavailable_reason

from ..conftest import BusFactory
from .shards import on_node

pytestmark = [pytest.mark.integration, pytest.mark.citus]

CONSOLE_LOGIN = "console_reader"
MESSAGE = re.compile(r"message (\d+)$")


@pytest.fixture
def growing_cluster(tmp_path: Path) -> Iterator[CitusCluster]:
    """A cluster of the test's own: it loses a node. Eight shards a table, so each move
    carries several shard groups."""
    install = find_install(CLUSTER)
    if install is None:
        pytest.skip(unavailable_reason(CLUSTER) or "Citus is not built")
    with CitusCluster(
        install,
        tmp_path / "cluster",
        shard_count=MoveConfig().shard_count,
        settings=CLUSTER_SETTINGS,
    ) as cluster:
        yield cluster


async def test_a_node_added_and_one_drained_under_traffic_lose_double_and_keep_nothing(
    growing_cluster: CitusCluster,
    make_bus: BusFactory,
    model_server: LocalModelServer,
    unique_name: str,
    tmp_path: Path,
) -> None:
    cluster = growing_cluster
    url = cluster.create_database(unique_name)
    migrate(url)
    with psycopg.connect(url, autocommit=True) as connection:  # before the new node exists
        connection.execute(f"CREATE ROLE {CONSOLE_LOGIN} LOGIN IN ROLE llm_bot_console")
    bus = make_bus(url, {}, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS)
    config = MoveConfig(users=2000, rate_per_s=25, settle_s=5, model_latency_ms=50)
    run = await asyncio.to_thread(
        grow_and_drain, cluster, url, bus, model_server, config, tmp_path, lambda _: None
    )
    print(report(run, config))  # shown when the test fails

    rebalance, drain = run.moves
    assert rebalance.shards > 0
    assert drain.shards > 0
    assert len(run.marks) >= 2000
    # Every event answered exactly once, nothing dead-lettered or answered as an error.
    assert run.arrived.keys() == run.sent.keys()
    assert set(run.copies.values()) == {1}
    assert run.dead_letters == []
    assert run.counts.get("dead_lettered", 0) == 0
    assert run.counts.get("outcome_error", 0) == 0
    with psycopg.connect(url) as connection:
        ledger = connection.execute(
            "SELECT correlation_id, outcome, published FROM processed_events WHERE step_key <> %s",
            (JOB_STEP,),
        ).fetchall()
        turns = connection.execute(
            "SELECT thread_id, user_id, seq, role, content FROM conversation_turns"
            " WHERE role <> 'summary' ORDER BY thread_id, seq"
        ).fetchall()
        memories = connection.execute("SELECT user_id, content FROM memories").fetchall()
        duplicated_versions = connection.execute(
            "SELECT user_id, key, version FROM memory_versions GROUP BY 1, 2, 3 HAVING count(*) > 1"
        ).fetchall()
    assert sorted(c for c, _, _ in ledger) == sorted(run.sent)
    assert {(outcome, published) for _, outcome, published in ledger} == {("OK", True)}
    # Every history whole (no seq missing in any thread) and each user's words in order.
    assert len(turns) == 2 * len(run.sent)
    said: dict[tuple[str, str], list[int]] = defaultdict(list)
    seqs: dict[str, list[int]] = defaultdict(list)
    for thread, user, seq, role, content in turns:
        seqs[thread].append(seq)
        if role == "user" and (found := MESSAGE.search(content)):
            said[thread, user].append(int(found.group(1)))
    assert all(s == list(range(1, len(s) + 1)) for s in seqs.values())
    assert sum(map(len, said.values())) == len(run.sent)
    assert all(indices == sorted(indices) for indices in said.values())
    # Consolidation wrote through the moves: a DM user's fact, once, and no one else's.
    assert memories
    assert {content for _, content in memories} == {"Keeps bees on a roof"}
    holders = [user for user, _ in memories]
    assert len(holders) == len(set(holders))
    assert set(holders) <= set(run.dm_users)
    assert duplicated_versions == []

    # The console's role reads every shard, those on the new node too, and writes none.
    console = url.replace("postgres@", f"{CONSOLE_LOGIN}@", 1)
    with psycopg.connect(console) as connection:
        row = connection.execute("SELECT count(*) FROM conversation_turns").fetchone()
        assert row is not None
        assert row[0] >= len(turns)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute("DELETE FROM memories")

    # Users whose shards moved are erased from every node, the drained one included.
    assert run.moved_users
    erased = run.moved_users[:3]
    kept = next(u for u in run.dm_users if u not in erased)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        for user in erased:
            await forget_user(connection, user)
    needles = [run.marks[u] for u in erased]
    left: dict[str, int] = dict.fromkeys(needles, 0)
    kept_found = 0
    for node in [*cluster.nodes, *cluster.retired]:
        found = on_node(node, unique_name, [*needles, run.marks[kept]])
        kept_found += found.pop(run.marks[kept])
        for needle, count in found.items():
            left[needle] += count
    assert left == dict.fromkeys(needles, 0)
    assert kept_found > 0, "the scan finds a user who was not erased"
