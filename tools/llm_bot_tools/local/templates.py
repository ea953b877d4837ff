"""Databases copied from a template, for the tests' servers (the embedded Postgres and each node
of a Citus cluster): a database made once, migrated or not, then sealed, and each test's own
database a copy of it.

A copy costs what copying a small database's files costs; making one afresh costs its
extensions, and on Citus registering the nodes and distributing every table, a command per
shard on every node: seconds a test. PostgreSQL copies a database only while no session is in
it, and Citus keeps one of its own in each database that has the extension (its maintenance
daemon), so a template is sealed first: no connection to it is allowed from then on, and the
sessions in it are ended. ``CREATE DATABASE`` itself waits a few seconds for those to be gone.
"""

from __future__ import annotations

from psycopg import Connection, sql


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
