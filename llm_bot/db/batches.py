"""What the group committer batches (:mod:`llm_bot.db.group_commit`): a work, the keys of the
rows it touches, and how a batch splits by them.

Works that share a key run one after another in the order they came, since one may read what
the other wrote (:func:`chains`). On Citus a transaction that writes on two nodes is a two-phase
commit, which a batch of unrelated users' events would nearly always be: a key that names a
user's or a thread's rows (:class:`UserRows`, :class:`ThreadRows`) also names their *tenant*,
and given the shard map (:mod:`llm_bot.db.placements`) a batch splits into one transaction per
set of nodes its chains write (:func:`by_node`). Works sharing a key stay in one transaction; a
work whose keys name no tenant joins the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Hashable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.placements import ShardMap, tenant_of_thread

Work = Callable[[AsyncConnection[Any]], Awaitable[None]]
# Names something works read and write (a processed-event row, a thread's history, a user's
# memories): keys are equal only within one type; a UserRows or ThreadRows also places it.
LockKey = Hashable


@dataclass(frozen=True)
class UserRows:
    """Some of one user's rows, as a key that also places them (on Citus, the user is their
    tenant): ``part`` says which (a processed event's row, the user's memories and notes), so
    that keys of different parts do not order each other."""

    part: Hashable
    user_id: str


@dataclass(frozen=True)
class ThreadRows:
    """Some of one thread's rows (``part`` as for :class:`UserRows`): its history's counter
    and, for a shared channel, its window, on its tenant's shard (:func:`tenant_of_thread`)."""

    part: Hashable
    thread_id: str


def tenants_of(keys: Collection[LockKey]) -> set[str]:
    """The tenants of the rows ``keys`` name; keys of other types name none."""
    found = set()
    for key in keys:
        if isinstance(key, UserRows):
            found.add(key.user_id)
        elif isinstance(key, ThreadRows):
            found.add(tenant_of_thread(key.thread_id))
    return found


@dataclass(frozen=True)
class Item:
    """A work waiting in the queue, with the keys of what it touches."""

    work: Work
    keys: Collection[LockKey]
    done: asyncio.Future[None] | None  # None: deferred, nobody waits


def chains(batch: list[Item]) -> list[list[Work]]:
    """The batch's works grouped so that works sharing a key (directly or through others) are
    in one chain, in the order they came; chains have no key in common."""
    return [[batch[index].work for index in chain] for chain in linked(batch)]


def by_node(batch: list[Item], shard_map: ShardMap) -> list[list[Item]]:
    """The batch as one transaction per set of nodes its chains write (:func:`linked`), each
    in the order its works came; chains whose keys name no tenant go with the first."""
    if shard_map.node_count == 1:
        return [batch]
    parts: dict[frozenset[Hashable], list[int]] = {}
    unplaced: list[int] = []
    for chain in linked(batch):
        tenants = tenants_of([key for index in chain for key in batch[index].keys])
        nodes = frozenset(shard_map.node_of(tenant) for tenant in tenants)
        (parts.setdefault(nodes, []) if nodes else unplaced).extend(chain)
    ordered = sorted((sorted(indexes) for indexes in parts.values()), key=lambda part: part[0])
    if not ordered:
        return [batch]
    ordered[0] = sorted(ordered[0] + unplaced)
    return [[batch[index] for index in indexes] for indexes in ordered]


def linked(batch: list[Item]) -> list[list[int]]:
    """The positions of :func:`chains`' works in the batch."""
    root = list(range(len(batch)))

    def find(index: int) -> int:
        while root[index] != index:
            index = root[index]
        return index

    first_with: dict[LockKey, int] = {}
    for index, item in enumerate(batch):
        for key in item.keys:
            if key in first_with:
                root[find(index)] = find(first_with[key])
            else:
                first_with[key] = index
    grouped: dict[int, list[int]] = {}
    for index in range(len(batch)):
        grouped.setdefault(find(index), []).append(index)
    return list(grouped.values())
