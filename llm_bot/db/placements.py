"""Which Citus node holds a tenant's rows, so the group committer keeps each transaction on one.

On Citus a transaction that writes on two nodes commits by two-phase commit (a ``PREPARE``
and a ``COMMIT PREPARED`` on each, and a record on the coordinator); one whose statements each
name one tenant and whose tenants share a node commits there alone, whichever of that node's
shards they are on (the coordinator reuses one connection per node). A batch of unrelated
users' events is therefore split by node (:mod:`llm_bot.db.group_commit`). Shards are not
the unit: with the default 32 shards over a few nodes a batch per shard would rarely hold more
than one event. A statement, though, is single-shard or it is two-phase committed even on one
node (Citus commits every multi-shard modification so): work that writes the rows of several
tenants in one statement groups them by :meth:`ShardMap.shard_of`.

The map is computed, not asked: a tenant's shard is the one whose hash range holds
PostgreSQL's ``hashtext`` of it (:func:`tenant_hash`, the hash Citus uses for a text
distribution column), so placing a tenant costs no round trip. The ranges and each shard's
node are read from the coordinator's metadata at start and again every :data:`REFRESH_S`
(a rebalance moves shards); the hash is checked against the coordinator's own placement of a
few probes at each read, and a map that disagrees is not used. A stale or missing map costs
two-phase commits, never correctness: every statement still names its tenant and Citus routes
it. On plain PostgreSQL there is one node and the map is :data:`ONE_NODE`.

A user's rows are the user's tenant; a thread's row (its counter, and a shared channel's
window) is the thread's tenant (:func:`tenant_of_thread`; docs/citus.md, "The shard key").
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import struct
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.distribution import ANCHOR
from llm_bot.events.identity import direct_user_of

logger = logging.getLogger(__name__)

REFRESH_S = 30.0
# Ids of the kinds a tenant has (a platform user id, a thread id), to check the hash with.
_PROBES = ("", "alice", "twitch:123456789", "discord:guild%3A1:channel", "ü€𝄞" * 5)
_WORD = 0xFFFFFFFF


def _rotated(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _WORD


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - c) & _WORD ^ _rotated(c, 4)
    c = (c + b) & _WORD
    b = (b - a) & _WORD ^ _rotated(a, 6)
    a = (a + c) & _WORD
    c = (c - b) & _WORD ^ _rotated(b, 8)
    b = (b + a) & _WORD
    a = (a - c) & _WORD ^ _rotated(c, 16)
    c = (c + b) & _WORD
    b = (b - a) & _WORD ^ _rotated(a, 19)
    a = (a + c) & _WORD
    c = (c - b) & _WORD ^ _rotated(b, 4)
    b = (b + a) & _WORD
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    c = (c ^ b) - _rotated(b, 14) & _WORD
    a = (a ^ c) - _rotated(c, 11) & _WORD
    b = (b ^ a) - _rotated(a, 25) & _WORD
    c = (c ^ b) - _rotated(b, 16) & _WORD
    a = (a ^ c) - _rotated(c, 4) & _WORD
    b = (b ^ a) - _rotated(a, 14) & _WORD
    return (c ^ b) - _rotated(b, 24) & _WORD


def tenant_of_thread(thread_id: str) -> str:
    """The tenant of the thread's row: a DM's user, a shared channel's own thread id."""
    user = direct_user_of(thread_id)
    return thread_id if user is None else user


def tenant_hash(tenant: str) -> int:
    """PostgreSQL's ``hashtext`` of ``tenant`` (``hash_bytes``, Bob Jenkins' lookup3, over its
    UTF-8 bytes, as a little-endian server computes it under a deterministic collation), as the
    signed 32-bit value Citus compares with its shards' ranges."""
    data = tenant.encode()
    left = len(data)
    a = b = c = (0x9E3779B9 + left + 3923095) & _WORD
    while left >= 12:
        x, y, z = struct.unpack_from("<III", data, len(data) - left)
        a, b, c = _mix((a + x) & _WORD, (b + y) & _WORD, (c + z) & _WORD)
        left -= 12
    x, y, z = struct.unpack("<III", data[len(data) - left :] + bytes(12 - left))
    # The last word's lowest byte stays for the length, which the seed already holds.
    c = _final((a + x) & _WORD, (b + y) & _WORD, (c + (z << 8)) & _WORD)
    return c - (1 << 32) if c >= 1 << 31 else c


@dataclass(frozen=True)
class ShardMap:
    """The shards of the tenants' tables by hash range (``starts`` ascending), with each
    shard's id and node; empty: one node holds everything."""

    starts: tuple[int, ...] = ()
    shards: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()

    def _index(self, tenant: str) -> int | None:
        if not self.starts:
            return None
        return max(0, bisect.bisect_right(self.starts, tenant_hash(tenant)) - 1)

    def shard_of(self, tenant: str) -> Hashable:
        """The shard of ``tenant``'s rows (one value for every tenant on one node)."""
        index = self._index(tenant)
        return None if index is None else self.shards[index]

    def node_of(self, tenant: str) -> Hashable:
        """The node of ``tenant``'s rows (one value for every tenant on one node)."""
        index = self._index(tenant)
        return None if index is None else self.nodes[index]

    @property
    def node_count(self) -> int:
        return len(set(self.nodes)) or 1


ONE_NODE = ShardMap()

_HAS_CITUS = "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')"
# Citus's catalog, only there with the extension.
_IS_DISTRIBUTED = """
SELECT EXISTS (SELECT FROM pg_dist_partition
                WHERE logicalrelid = to_regclass(%(table)s) AND partmethod = 'h')
"""

_SHARDS = """
SELECT s.shardminvalue::int, s.shardid, p.groupid
  FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
 WHERE s.logicalrelid = to_regclass(%(table)s)
 ORDER BY s.shardminvalue::int
"""

_PROBED = """
SELECT probe, get_shard_id_for_distribution_column(%(table)s, probe)
  FROM unnest(%(probes)s::text[]) AS probe
"""


async def read_shard_map(connection: AsyncConnection[Any], table: str = ANCHOR) -> ShardMap:
    """The map of ``table``'s shards (by default those of the colocation group every table
    llm-bot distributes is in) from the coordinator's metadata; :data:`ONE_NODE` without
    Citus, with ``table`` not distributed, or when the computed hash does not place the probes
    where the coordinator does (a big-endian server, a nondeterministic collation)."""
    params = {"table": table, "probes": list(_PROBES)}
    for question in (_HAS_CITUS, _IS_DISTRIBUTED):
        row = await (await connection.execute(question, params)).fetchone()
        if row is None or not row[0]:
            return ONE_NODE
    rows = await (await connection.execute(_SHARDS, params)).fetchall()
    if not rows:
        return ONE_NODE
    shard_map = ShardMap(
        *(tuple(int(value) for value in column) for column in zip(*rows, strict=True))
    )
    probed = await (await connection.execute(_PROBED, params)).fetchall()
    if any(shard_map.shard_of(probe) != shard for probe, shard in probed):
        logger.warning("the computed shard of a tenant is not Citus's: batches are not split")
        return ONE_NODE
    return shard_map


class Placements:
    """The current :class:`ShardMap`, read again every ``refresh_s`` by :meth:`keep_current`."""

    def __init__(self, table: str = ANCHOR, refresh_s: float = REFRESH_S) -> None:
        self._table = table
        self._refresh_s = refresh_s
        self.current = ONE_NODE

    async def load(self, pool: AsyncConnectionPool[Any]) -> None:
        """Read the map; a failure keeps the one in use (it is only an optimisation)."""
        try:
            async with pool.connection() as connection:
                self.current = await read_shard_map(connection, self._table)
        except (psycopg.Error, OSError) as error:
            logger.warning("could not read the shard map: %s", error)

    async def keep_current(self, pool: AsyncConnectionPool[Any]) -> None:
        """Reload forever: shards move on a rebalance, and a database may be distributed
        while workers run."""
        while True:
            await asyncio.sleep(self._refresh_s)
            await self.load(pool)
