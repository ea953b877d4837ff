"""Throw-away schemas for measurements: each run loads its data where nothing else lives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from psycopg import AsyncConnection, sql


def with_search_path(database_url: str, schema: str) -> str:
    """``database_url`` whose sessions resolve unqualified tables in ``schema`` first."""
    separator = "&" if "?" in database_url else "?"
    return f"{database_url}{separator}options=-csearch_path%3D{schema},public"


@asynccontextmanager
async def scratch_schema(database_url: str, schema: str) -> AsyncIterator[str]:
    """A fresh, empty ``schema``, dropped afterwards; yields a URL that works inside it."""
    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
    async with await AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute(drop)
        await admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield with_search_path(database_url, schema)
    finally:
        async with await AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute(drop)
