"""An access request: everything we hold about one user, as one JSON document.

The rows exported are exactly the rows :func:`llm_bot.lifecycle.erasure.forget_user` deletes
(the same table list and conditions), read in one snapshot, so what a user is shown and what
an erasure removes can never drift apart. Vectors and full-text columns are left out: they are
derived from the texts that are exported, and mean nothing to a person. A stored event (the
bytes llm-bot published) is exported as the JSON it is. Tool calls are exported with their
arguments and outcomes: they are what the user's messages had done on the platform in their
name (a schedule made, a user banned), which an access request is owed as much as the words.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.db.rows import read
from llm_bot.lifecycle.erasure import USER_ROWS

FORMAT = "llm-bot.user-export.v1"
# Derived or internal columns: vectors, full-text lexemes, claim tokens.
_LEFT_OUT = {"embedding", "embedding_next", "search", "claim_token"}
# Columns whose name in the document is not the column's: the format's name stays.
_EXPORTED_AS = {"visibility": "learned_in"}


async def export_user(connection: AsyncConnection[Any], user_id: str) -> dict[str, Any]:
    tables: dict[str, list[dict[str, Any]]] = {}
    async with connection.transaction():
        await connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for rows in (rows_of(user_id) for rows_of in USER_ROWS):
            tables[rows.table] = [_readable(row) for row in await read(connection, rows)]
    return {
        "format": FORMAT,
        "userId": user_id,
        "exportedAt": iso_timestamp(utc_now()),
        "tables": tables,
    }


def _readable(row: dict[str, Any]) -> dict[str, Any]:
    return {
        _EXPORTED_AS.get(name, name): _value(value)
        for name, value in row.items()
        if name not in _LEFT_OUT
    }


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_timestamp(value)
    if isinstance(value, bytes | memoryview):
        data = bytes(value)
        try:
            return json.loads(data)
        except ValueError:
            return {"base64": base64.b64encode(data).decode("ascii")}
    return value
