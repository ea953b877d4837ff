"""The group committer's split of a batch by Citus node, and the hash that places a tenant:
one transaction per set of nodes its keys' rows are on, works sharing a key kept together and
in order, no split with one node."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from psycopg import AsyncConnection

from llm_bot.db.batches import Item, ThreadRows, UserRows, by_node
from llm_bot.db.placements import ONE_NODE, ShardMap, tenant_hash

# PostgreSQL's hashtext of each (SELECT hashtext(...) on PostgreSQL 18, x86-64); the
# integration tests compare with the cluster's own for many more.
HASHES = {
    "": -1477818771,
    "alice": 791529341,
    "twitch:123456789": -898106727,
    "discord:guild%3A1:channel:user": 491850462,
    "üñí€𝄞 çödé": -1005727611,
    "bob": -2077126515,
    "carol": 531894902,
    "slack:T01:U02": 466751777,
}
# Two shards: the lower half of the hash range on node 1, the upper on node 2.
TWO_NODES = ShardMap(starts=(-(2**31), 0), shards=(101, 102), nodes=(1, 2))
ON_1 = [name for name in HASHES if HASHES[name] < 0]
ON_2 = [name for name in HASHES if HASHES[name] >= 0]


async def work(connection: AsyncConnection[Any]) -> None:
    """Stands for an event's writes: only the transaction it lands in matters here."""


def item(tenant: str | None, *keys: str) -> Item:
    """A work on ``tenant``'s rows (its own, ordering no other work) and on ``keys``."""
    each = functools.partial(work)
    placed = () if tenant is None else (UserRows(each, tenant),)
    return Item(each, (*keys, *placed), None)


@pytest.mark.parametrize(("tenant", "expected"), HASHES.items())
def test_tenant_hash_is_postgres_hashtext(tenant: str, expected: int) -> None:
    assert tenant_hash(tenant) == expected


def test_a_tenant_is_placed_by_the_range_its_hash_falls_in() -> None:
    assert {TWO_NODES.node_of(name) for name in ON_1} == {1}
    assert {TWO_NODES.node_of(name) for name in ON_2} == {2}
    assert TWO_NODES.shard_of("alice") == 102
    assert ONE_NODE.node_of("alice") is None
    assert ONE_NODE.node_count == 1


def test_a_batch_is_one_transaction_per_node_in_arrival_order() -> None:
    batch = [item(ON_1[0]), item(ON_2[0]), item(ON_1[1]), item(None), item(ON_2[1])]
    assert by_node(batch, TWO_NODES) == [
        [batch[0], batch[2], batch[3]],  # the tenant-less work joins the first
        [batch[1], batch[4]],
    ]


def test_works_sharing_a_key_stay_in_one_transaction_across_nodes() -> None:
    """A chain on both nodes (a shared channel's counter, say) is one transaction, with any
    other chain writing the same two nodes; the chains of one node each go alone."""
    batch = [
        item(ON_1[0], "channel"),
        item(ON_1[1]),
        item(ON_2[0], "channel"),
        item(ON_2[1], "lobby"),
        item(ON_1[2], "lobby"),
        item(ON_2[2]),
    ]
    assert by_node(batch, TWO_NODES) == [
        [batch[0], batch[2], batch[3], batch[4]],
        [batch[1]],
        [batch[5]],
    ]


def test_a_work_writing_two_nodes_commits_with_the_others_writing_both() -> None:
    """A shared channel's event (its author's shard and the channel's): the one transaction
    that needs a two-phase commit, while each node's other works commit there alone."""
    channel = "twitch:123456789"  # a shared channel's thread: its own tenant, on node 1
    both = item(ON_2[0], ThreadRows("history", channel))
    assert TWO_NODES.node_of(channel) == 1
    batch = [item(ON_1[1]), both, item(ON_2[1]), item(ON_2[2], "lobby"), item(ON_1[2], "lobby")]
    assert by_node(batch, TWO_NODES) == [[batch[0]], [batch[1], batch[3], batch[4]], [batch[2]]]


def test_one_node_leaves_the_batch_whole() -> None:
    batch = [item(name) for name in HASHES]
    assert by_node(batch, ONE_NODE) == [batch]
    assert by_node(batch, ShardMap(starts=(-(2**31), 0), shards=(1, 2), nodes=(7, 7))) == [batch]
