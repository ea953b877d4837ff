"""Databases copied from a template, for the tests' servers (the embedded Postgres and each node
of a Citus cluster): a database made once, migrated or not, then sealed, and each test's own
database a copy of it, dropped when the test ends.

A copy costs what copying a small database's files costs; making one afresh costs its
extensions, and on Citus registering the nodes and distributing every table, a command per
shard on every node: seconds a test. PostgreSQL copies a database only while no session is in
it, and Citus keeps one of its own in each database that has the extension (its maintenance
daemon), so a template is sealed first: no connection to it is allowed from then on, and the
sessions in it are ended. ``CREATE DATABASE`` itself waits a few seconds for those to be gone.

A test's database is closed the same way before it is dropped, for the same daemon, and the
drop waits until the sessions are gone. The first use of a database starts the daemon, which
connects back to it; ``DROP DATABASE … WITH (FORCE)`` alone ends the sessions, then holds the
database while it waits for the rest to leave, and a daemon whose connection waits on that
hold never leaves: the drop fails after five seconds and the daemon goes two later (measured
on a three-node cluster, a test that used its database a moment before it ended: 7.1-7.3 s a
drop; closed and waited for first, 0.03 s, or 2.0 s where the daemon was connecting).
"""

from __future__ import annotations

import time

from psycopg import Connection, sql

# How long a drop waits for the sessions it ended to leave before forcing it.
DROP_WAIT_S = 10.0
_POLL_S = 0.01


def create_statement(name: str, template: str | None) -> sql.Composed:
    """``CREATE DATABASE name``, a copy of ``template`` where one is named."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is None:
        return statement
    return statement + sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))


def seal(connection: Connection[object], name: str) -> None:
    """Keep ``name`` as it is from now on, to be copied: no new connection to it, and the
    sessions in it ended (``connection`` is to another database of the same server)."""
    connection.execute(
        sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name))
    )
    connection.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
    )


def drop(connection: Connection[object], name: str) -> None:
    """Drop ``name`` where it exists, even while sessions are in it, so neither a leaked pool
    nor a daemon starting blocks cleanup (``connection`` is to another database of the same
    server): sealed, the sessions' end awaited (at most ``DROP_WAIT_S``), then dropped with
    ``WITH (FORCE)`` for any left."""
    exists = connection.execute("SELECT FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if exists is not None:
        seal(connection, name)
        deadline = time.monotonic() + DROP_WAIT_S
        while _sessions(connection, name) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
    connection.execute(
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    )


def _sessions(connection: Connection[object], name: str) -> int:
    row = connection.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
    ).fetchone()
    return int(row[0]) if row is not None else 0  # type: ignore[index]
