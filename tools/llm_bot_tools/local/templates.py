"""Databases copied from a template, for the tests' servers (the embedded Postgres and each node
of a Citus cluster): a database made once, migrated or not, then sealed, and each test's own
database a copy of it, dropped when the test ends.

A copy costs what copying a small database's files costs; making one afresh costs its
extensions, and on Citus registering the nodes and distributing every table, a command per
shard on every node: seconds a test. PostgreSQL copies a database only while no session is in
it, and Citus keeps one of its own in each database that has the extension (its maintenance
daemon), so a template is sealed first: no connection to it is allowed from then on, and the
sessions in it are ended. ``CREATE DATABASE`` itself waits a few seconds for those to be gone.

A test's database is dropped once no session is left in it. The first use of a database starts
the daemon, which connects back to it; ``DROP DATABASE … WITH (FORCE)`` alone ends the sessions,
then holds the database while it waits for the rest to leave, and a daemon whose connection
waits on that hold never leaves: the drop fails after five seconds and the daemon goes two
later. Sealed first, the daemon's connection is refused and it still takes two seconds to go.
So the sessions are ended, again while new ones appear, until none is left; then the database
is sealed and dropped (measured on a three-node cluster, a test that used its database a moment
before it ended: 7.1-7.3 s a drop with FORCE alone, 0.03 or 2.0 s sealed first, 0.04-0.15 s).
"""

from __future__ import annotations

import time

from psycopg import Connection, sql

# How long a drop keeps ending the sessions in a database before forcing it.
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
    _end_sessions(connection, name)


def drop(connection: Connection[object], name: str) -> None:
    """Drop ``name`` where it exists, even while sessions are in it, so neither a leaked pool
    nor a daemon starting blocks cleanup (``connection`` is to another database of the same
    server): its sessions ended until none is left (at most ``DROP_WAIT_S``), then sealed and
    dropped ``WITH (FORCE)`` for any that came since."""
    exists = connection.execute("SELECT FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if exists is not None:
        deadline = time.monotonic() + DROP_WAIT_S
        while _end_sessions(connection, name) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        seal(connection, name)
    connection.execute(
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    )


def _end_sessions(connection: Connection[object], name: str) -> int:
    """How many sessions are in ``name``, each told to end (one ending is still counted)."""
    row = connection.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
        (name,),
    ).fetchone()
    return int(row[0]) if row is not None else 0  # type: ignore[index]
