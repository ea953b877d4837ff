"""Throw-away schemas for measurements (``llm-bot eval``, ``llm-bot bench``): each run loads its
data into a schema of its own and reads nothing it did not load there.

A scratch session finds unqualified names in the scratch schema, then in the schema the
pgvector extension lives in: its types (``vector``, ``halfvec``), operators (``<=>``) and
operator classes are found nowhere else, and the migrations create every table and function of
ours in the scratch, the first schema on the path. A table in the extension's schema would be
found too wherever the scratch has none of that name (before migrating, ``schema_migrations``
itself: the run would then measure that schema's tables), so a scratch goes only where that
schema holds no relation: in the database measured on when it holds none, else in the
measurements' own database beside it on the same server (``MEASUREMENTS_DATABASE``, made with
the extension by the first run that needs it, and kept). After ``llm-bot dev`` the embedded
server's ``public`` holds both the extension and the demo's tables.

Several runs go at once, so each schema has a name of its own; it is dropped when its run ends,
by an exception or Ctrl-C too. Its run holds an advisory lock keyed by the schema's oid, on a
connection of its own, for as long as the schema lives: a schema whose lock is free lost its run
(killed with -9, or its connection cut), and the next run in that database drops it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection, errors, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

MEASUREMENTS_DATABASE = "llm_bot_measurements"
# The comment on every scratch schema: what the sweep of abandoned ones may drop, nothing else.
MARKER = "llm-bot scratch schema: dropped when the run that made it ends"
# First key of the two-key advisory locks of scratch schemas, the second being a schema's oid
# (0 while the measurements' database gets its extension): the one-key locks of migrations and
# index builds are a space apart.
LOCK_SPACE = 0x11B07

_EXTENSION_SCHEMA_IF_BARE = """
SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'vector' AND NOT EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = n.oid)
"""


class ScratchSchemaUnavailable(RuntimeError):
    """No database on the server can hold a scratch schema that sees nothing else."""


@asynccontextmanager
async def scratch_schema(database_url: str, prefix: str) -> AsyncIterator[str]:
    """A new, empty schema named ``prefix`` and a suffix of its own, dropped afterwards; yields
    a connection string whose sessions work inside it (see the module)."""
    url, extension_schema = await _isolated_database(database_url)
    async with await AsyncConnection.connect(url, autocommit=True) as owner:
        await _drop_abandoned(owner)
        schema = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        async with owner.transaction():  # no other run sees the schema before it is locked
            await owner.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            await owner.execute(
                sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                    sql.Identifier(schema), sql.Literal(MARKER)
                )
            )
            await owner.execute(
                "SELECT pg_advisory_lock(%s, %s::regnamespace::oid::int)", (LOCK_SPACE, schema)
            )
        try:
            yield _with_search_path(url, [schema, extension_schema])
        finally:
            await owner.execute(_drop(schema))


def _with_search_path(database_url: str, schemas: Sequence[str]) -> str:
    """``database_url`` whose sessions find unqualified names in ``schemas``, in that order,
    besides the system catalogs (the options it had are kept)."""
    path = ",".join('"' + schema.replace('"', '""') + '"' for schema in schemas)
    option = "-csearch_path=" + path.replace("\\", "\\\\").replace(" ", "\\ ")  # libpq's escapes
    options = conninfo_to_dict(database_url).get("options")
    return make_conninfo(database_url, options=f"{options} {option}" if options else option)


async def _isolated_database(database_url: str) -> tuple[str, str]:
    """The database a scratch schema goes in, and the schema of its vector extension."""
    schema = await _bare_extension_schema(database_url)
    if schema is not None:
        return database_url, schema
    measurements = make_conninfo(database_url, dbname=MEASUREMENTS_DATABASE)
    refused = (
        "the vector extension of the database measured on is missing or shares its schema with"
        " tables, which a scratch schema would see, and the measurements' own database"
        f" {MEASUREMENTS_DATABASE} beside it cannot take its place"
    )
    try:
        await _make_measurements_database(database_url, measurements)
    except psycopg.Error as error:
        raise ScratchSchemaUnavailable(f"{refused}: making it failed: {error}") from error
    schema = await _bare_extension_schema(measurements)
    if schema is None:
        raise ScratchSchemaUnavailable(f"{refused}: its extension's schema holds relations too")
    return measurements, schema


async def _bare_extension_schema(database_url: str) -> str | None:
    """The schema of the database's vector extension when it holds no relation, else None."""
    async with await AsyncConnection.connect(database_url, autocommit=True) as connection:
        row = await (await connection.execute(_EXTENSION_SCHEMA_IF_BARE)).fetchone()
    return None if row is None else str(row[0])


async def _make_measurements_database(server_url: str, url: str) -> None:
    """Create the measurements' database and its vector extension, unless there: runs that
    start together each try, and all but one find them made."""
    async with await AsyncConnection.connect(server_url, autocommit=True) as server:
        found = await server.execute(
            "SELECT FROM pg_database WHERE datname = %s", (MEASUREMENTS_DATABASE,)
        )
        if await found.fetchone() is None:
            # Made by another run meanwhile: DuplicateDatabase, or when both inserted at once
            # into pg_database, UniqueViolation.
            with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
                await server.execute(
                    sql.SQL("CREATE DATABASE {}").format(sql.Identifier(MEASUREMENTS_DATABASE))
                )
    async with await AsyncConnection.connect(url) as database, database.transaction():
        await database.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_SPACE,))
        await database.execute("CREATE EXTENSION IF NOT EXISTS vector")


async def _drop_abandoned(owner: AsyncConnection[Any]) -> None:
    """Drop the scratch schemas whose run is gone: their lock is free."""
    cursor = await owner.execute(
        "SELECT oid::int, nspname FROM pg_namespace"
        " WHERE obj_description(oid, 'pg_namespace') = %s",
        (MARKER,),
    )
    for key, schema in await cursor.fetchall():
        taken = await owner.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, key))
        row = await taken.fetchone()
        if row is None or not row[0]:
            continue  # its run is alive
        try:
            await owner.execute(_drop(schema))
        finally:
            await owner.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_SPACE, key))


def _drop(schema: str) -> sql.Composed:
    return sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
