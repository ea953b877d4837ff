"""Facts that change: the earlier texts of a memory, each with the period it was current.

A memory is current in ``store``; rewriting it under its key (the model corrects "vegetarian"
to "vegan" by passing the key it was shown, or a near-duplicate is merged into it) first copies
the text it had into ``memory_versions`` with ``valid_from`` (when that text was written) and
``valid_to`` (now). Context assembly reads only ``store``, so a retired text is never injected
again, and ``llm-bot memories get --history`` shows how the fact changed. Forgetting a memory
(``deleteMemory``, ``llm-bot memories delete``) removes its versions too: a user who asks us to
forget something is not asking us to remember that they once said it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

# Only a change of text makes a version: the same fact said again is no new version.
_RETIRE_CURRENT = """
INSERT INTO memory_versions (prefix, key, version, content, metadata, learned_in, valid_from,
                             valid_to)
SELECT s.prefix, s.key,
       coalesce((SELECT max(v.version) FROM memory_versions v
                  WHERE v.prefix = s.prefix AND v.key = s.key), 0) + 1,
       s.value->>'content', coalesce(s.value->'metadata', '{}'),
       coalesce(s.value->>'learnedIn', 'dm'), least(s.updated_at, now()), now()
  FROM store s
 WHERE s.prefix = %(prefix)s AND s.key = %(key)s
   AND s.value->>'content' IS DISTINCT FROM %(content)s
"""


@dataclass(frozen=True)
class Version:
    version: int
    content: str
    metadata: dict[str, str]
    learned_in: str
    valid_from: datetime
    valid_to: datetime


async def retire_current(
    connection: AsyncConnection[Any], prefix: str, key: str, new_content: str
) -> None:
    """Keep the memory's current text as a version, in the caller's transaction, before it is
    overwritten with ``new_content``."""
    await connection.execute(
        _RETIRE_CURRENT, {"prefix": prefix, "key": key, "content": new_content}
    )


async def forget_versions(connection: AsyncConnection[Any], prefix: str, key: str) -> None:
    await connection.execute(
        "DELETE FROM memory_versions WHERE prefix = %s AND key = %s", (prefix, key)
    )


async def versions_of(connection: AsyncConnection[Any], prefix: str, key: str) -> list[Version]:
    """Earlier texts of the memory, oldest first."""
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT version, content, metadata, learned_in, valid_from, valid_to"
            " FROM memory_versions WHERE prefix = %s AND key = %s ORDER BY version",
            (prefix, key),
        )
        return [Version(**row) for row in await cursor.fetchall()]
