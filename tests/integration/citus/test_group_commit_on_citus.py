"""The group committer on a Citus cluster: its shard map places tenants where Citus does, a
batch of users on both workers commits as one transaction per worker without two-phase
commit, and a shard moved by a rebalance is found on its new node."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.batches import UserRows
from llm_bot.db.gathered_marks import GatheredMarks
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.leases import LeaseKeeper
from llm_bot.db.migrate import migrate
from llm_bot.db.placements import Placements, read_shard_map, tenant_hash
from llm_bot.db.processed_events import Claim, EventKey, claim_or_wait, try_claim

pytestmark = [pytest.mark.integration, pytest.mark.citus]

TABLE = "writes"
# Tenants of the shapes llm-bot's are (platform ids, thread ids), and text beyond ASCII.
TENANTS = [f"twitch:{n}" for n in range(150)] + [f"discord:g%3A{n}:ch:ü€{n}" for n in range(150)]
PER_NODE = 6
# Written by Citus (citus.log_remote_commands) when it commits across nodes.
PREPARE = "PREPARE TRANSACTION"


class Logged:
    """The commands the coordinator sent to workers on the pool's connections."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def configure(self, connection: AsyncConnection[Any]) -> None:
        await connection.execute("SET citus.log_remote_commands = on")
        connection.add_notice_handler(self._notice)

    def _notice(self, notice: psycopg.errors.Diagnostic) -> None:
        self.lines.append(notice.message_primary or "")

    def count(self, command: str) -> int:
        return sum(line.startswith(f"issuing {command}") for line in self.lines)


@pytest.fixture
async def logged() -> Logged:
    return Logged()


@pytest.fixture
async def pool(citus_database_url: str, logged: Logged) -> AsyncIterator[AsyncConnectionPool[Any]]:
    with psycopg.connect(citus_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (user_id text, n int, PRIMARY KEY (user_id, n))")
        conn.execute("SELECT create_distributed_table(%s, 'user_id')", (TABLE,))
    async with AsyncConnectionPool(
        citus_database_url,
        min_size=1,
        max_size=4,
        kwargs={"autocommit": True},
        configure=logged.configure,
    ) as opened:
        yield opened


def insert(user_id: str, n: int) -> Callable[[AsyncConnection[Any]], Awaitable[None]]:
    async def work(connection: AsyncConnection[Any]) -> None:
        await connection.execute(f"INSERT INTO {TABLE} VALUES (%s, %s)", (user_id, n))

    return work


async def placement_of(pool: AsyncConnectionPool[Any]) -> dict[str, tuple[int, int, int]]:
    """Each tenant's hash, shard and node as the coordinator computes them."""
    async with pool.connection() as connection:
        cursor = await connection.execute(
            "SELECT t, worker_hash(t), s.shardid, p.groupid FROM unnest(%s::text[]) t"
            " JOIN pg_dist_placement p"
            "   ON p.shardid = get_shard_id_for_distribution_column(%s, t)"
            " JOIN pg_dist_shard s ON s.shardid = p.shardid",
            (TENANTS, TABLE),
        )
        return {row[0]: tuple(row[1:]) for row in await cursor.fetchall()}


def per_node(placed: dict[str, tuple[int, int, int]]) -> dict[int, list[str]]:
    nodes: dict[int, list[str]] = {}
    for tenant, (_, _, node) in placed.items():
        nodes.setdefault(node, []).append(tenant)
    return nodes


async def test_the_shard_map_places_every_tenant_where_citus_does(
    pool: AsyncConnectionPool[Any],
) -> None:
    placed = await placement_of(pool)
    async with pool.connection() as connection:
        shard_map = await read_shard_map(connection, TABLE)
    assert {t: tenant_hash(t) for t in TENANTS} == {
        t: hashed for t, (hashed, _, _) in placed.items()
    }
    assert {t: shard_map.shard_of(t) for t in TENANTS} == {t: s for t, (_, s, _) in placed.items()}
    assert {t: shard_map.node_of(t) for t in TENANTS} == {t: n for t, (_, _, n) in placed.items()}
    assert shard_map.node_count == 2


async def test_a_batch_of_users_on_both_workers_commits_on_each_without_two_phase_commit(
    pool: AsyncConnectionPool[Any], logged: Logged
) -> None:
    nodes = per_node(await placement_of(pool))
    users = [user for tenants in nodes.values() for user in tenants[:PER_NODE]]
    assert len(nodes) == 2
    assert len(users) == 2 * PER_NODE
    logged.lines.clear()
    committer = GroupCommitter(pool, max_batch=64, max_delay_s=0.0, placements=Placements(TABLE))
    async with committer:
        await asyncio.gather(
            *(committer.commit(insert(u, 1), (UserRows("row", u),)) for u in users)
        )
    assert committer.committed == len(users)
    assert committer.transactions == 2, "one batch, one transaction per worker"
    assert logged.count("COMMIT") == 2, logged.lines
    assert logged.count(PREPARE) == 0, logged.lines
    async with pool.connection() as connection:
        stored = await (await connection.execute(f"SELECT user_id FROM {TABLE}")).fetchall()
    assert sorted(row[0] for row in stored) == sorted(users)


async def test_a_shard_moved_by_a_rebalance_is_found_on_its_new_node_after_a_reload(
    pool: AsyncConnectionPool[Any], logged: Logged
) -> None:
    placements = Placements(TABLE)
    await placements.load(pool)
    placed = await placement_of(pool)
    moving = TENANTS[0]
    _, shard, node = placed[moving]
    async with pool.connection() as connection:
        await connection.execute(
            "SELECT citus_move_shard_placement(%(shard)s, source.nodename, source.nodeport,"
            " target.nodename, target.nodeport, shard_transfer_mode => 'block_writes')"
            "  FROM pg_dist_node source, pg_dist_node target"
            " WHERE source.groupid = %(node)s AND target.groupid NOT IN (0, %(node)s)"
            "   AND source.noderole = 'primary' AND target.noderole = 'primary'",
            {"shard": shard, "node": node},
        )
    assert placements.current.node_of(moving) == node  # stale until read again
    await placements.load(pool)
    moved_to = placements.current.node_of(moving)
    assert moved_to != node
    # Its new neighbours and it now share a transaction that commits on one node.
    neighbours = [t for t, (_, _, n) in (await placement_of(pool)).items() if n == moved_to]
    assert moving in neighbours
    users = [moving, *[t for t in neighbours if t != moving][:PER_NODE]]
    logged.lines.clear()
    committer = GroupCommitter(pool, max_batch=64, max_delay_s=0.0, placements=placements)
    async with committer:
        await asyncio.gather(
            *(committer.commit(insert(u, 2), (UserRows("row", u),)) for u in users)
        )
    assert committer.transactions == 1
    assert logged.count(PREPARE) == 0, logged.lines


async def test_claims_carrying_published_marks_stay_on_their_nodes(
    citus_database_url: str, pool: AsyncConnectionPool[Any], logged: Logged
) -> None:
    """A claim takes the marks of its own shard along and the rest are marked by a deferred
    statement per shard, so neither makes a two-phase commit (marks gathered for every user
    at once would: a statement over several shards is one, even on one node)."""
    await asyncio.to_thread(migrate, citus_database_url)  # distributes the tables
    async with pool.connection() as connection:
        shard_map = await read_shard_map(connection)
    nodes: dict[Hashable, list[str]] = {}
    for tenant in TENANTS:
        nodes.setdefault(shard_map.node_of(tenant), []).append(tenant)
    users = [user for tenants in nodes.values() for user in tenants[:PER_NODE]]
    assert len(nodes) == 2
    committer = GroupCommitter(pool, max_batch=64, max_delay_s=0.0, placements=Placements())
    async with committer:
        marks = GatheredMarks(committer)

        async def claim(user: str, event: str) -> EventKey:
            key = EventKey(user, f"{event}-{user}", "0:llm-bot")
            claimed = await claim_or_wait(
                committer.commit, key, lease_s=30, wait_s=5, marks=marks.of(user)
            )
            assert isinstance(claimed, Claim)
            return key

        first = await asyncio.gather(*(claim(user, "first") for user in users))
        async with pool.connection() as connection:  # their outputs stored and published
            await connection.execute(
                "UPDATE processed_events SET outcome = 'OK', output_data = 'x'"
                " WHERE user_id = ANY(%s)",
                (users,),
            )
        for key in first:
            marks.of(key.user_id).add(key)
        logged.lines.clear()
        await asyncio.gather(*(claim(user, "second") for user in users))
    async with pool.connection() as connection:
        cursor = await connection.execute(
            "SELECT count(*) FILTER (WHERE published), count(*) FROM processed_events"
        )
        assert await cursor.fetchone() == (len(users), 2 * len(users))
    assert logged.count(PREPARE) == 0, logged.lines


async def test_leases_of_users_on_both_workers_are_renewed_without_two_phase_commit(
    citus_database_url: str, pool: AsyncConnectionPool[Any], logged: Logged
) -> None:
    """A heartbeat renews each shard's claims in a statement of its own: one statement over
    users on several nodes is a two-phase commit that can close a deadlock between nodes."""
    await asyncio.to_thread(migrate, citus_database_url)
    placements = Placements()
    await placements.load(pool)
    nodes: dict[Hashable, list[str]] = {}
    for tenant in TENANTS:
        nodes.setdefault(placements.current.node_of(tenant), []).append(tenant)
    users = [user for tenants in nodes.values() for user in tenants[:PER_NODE]]
    assert len(nodes) == 2
    claims = []
    async with pool.connection() as connection:
        for user in users:
            claimed = await try_claim(connection, EventKey(user, f"lease-{user}", "0:x"), 30)
            assert isinstance(claimed, Claim)
            claims.append(claimed)
        before = await lease_ends(connection, users)
    logged.lines.clear()
    async with LeaseKeeper(pool, lease_s=0.4, placements=placements) as leases:
        with contextlib.ExitStack() as holding:
            for claimed in claims:
                holding.enter_context(leases.holding(claimed))
            async with asyncio.timeout(30):
                while True:  # until one heartbeat renewed every lease
                    async with pool.connection() as connection:
                        after = await lease_ends(connection, users)
                    if all(after[user] != before[user] for user in users):
                        break
                    await asyncio.sleep(0.05)
    assert logged.count("UPDATE") >= 2, logged.lines
    assert logged.count(PREPARE) == 0, logged.lines


async def lease_ends(connection: AsyncConnection[Any], users: list[str]) -> dict[str, Any]:
    cursor = await connection.execute(
        "SELECT user_id, lease_until FROM processed_events WHERE user_id = ANY(%s)", (users,)
    )
    return {row[0]: row[1] for row in await cursor.fetchall()}
