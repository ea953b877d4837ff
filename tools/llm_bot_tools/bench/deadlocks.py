"""PostgreSQL's own count of deadlocks in one database (``pg_stat_database.deadlocks``), for
runs that must have none: the benchmark's settings and the burst test of lease renewal.

A backend counts a deadlock it breaks in its own memory and adds that to the shared statistics
when it goes idle (at most once a second, else within ten seconds) and when it exits, before it
leaves ``pg_stat_activity``. So the count covers a run once every session that ran it has
ended: :func:`deadlocks` waits for the database's other client sessions to end, then reads it.
On a Citus cluster each node counts the deadlocks among its own shards' rows, and the
maintenance daemon of every node keeps sessions open on the others for as long as it runs
(two-phase commit recovery, distributed deadlock detection): those are not waited for.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import psycopg

POLL_S = 0.05

_DAEMONS = "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'Citus Maintenance Daemon%'"
# A Citus node's session on another names the process it serves in its application name, as
# a global pid: the node's id times 10^10 plus that process's pid.
_OTHER_SESSIONS = r"""
SELECT coalesce(string_agg(DISTINCT application_name, ', '), '') FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND backend_type = 'client backend'
   AND coalesce(substring(application_name FROM '^citus_internal gpid=(\d+)$')::bigint
                %% 10000000000 <> ALL(%(daemons)s::bigint[]), true)
"""
_DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"


def deadlocks(urls: Sequence[str], *, timeout_s: float = 30.0) -> int:
    """The deadlocks PostgreSQL broke in the database of each of ``urls`` (one server, or every
    node of a Citus cluster), summed, once no other client session is connected to any of
    them but the Citus maintenance daemons'. (A deadlock that spans nodes is Citus's to break:
    no node counts it.) The daemons are read again at each look: a database made a moment ago
    starts its daemons when first used."""
    deadline = time.monotonic() + timeout_s
    total = 0
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(psycopg.connect(url, autocommit=True)) for url in urls]
        for url, connection in zip(urls, nodes, strict=True):
            while others := _others(connection, nodes):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{url}: still connected after {timeout_s}s: {others}")
                time.sleep(POLL_S)
            total += int(_read(connection, _DEADLOCKS))
    return total


def _others(connection: psycopg.Connection[Any], nodes: Sequence[psycopg.Connection[Any]]) -> str:
    """The other client sessions in ``connection``'s database, but the daemons' of ``nodes``."""
    daemons = [int(row[0]) for node in nodes for row in node.execute(_DAEMONS).fetchall()]
    return str(_read(connection, _OTHER_SESSIONS, {"daemons": daemons}))


def _read(
    connection: psycopg.Connection[Any], query: str, params: dict[str, Any] | None = None
) -> Any:
    row = connection.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query.split()[0]}")
    return row[0]
