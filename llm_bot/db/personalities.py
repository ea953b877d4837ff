"""Personalities by name: BitBrat's personality documents in the ``personalities`` table.

A ``personality`` annotation that names a personality instead of writing it out
(``{"kind": "personality", "value": "bratty"}``) gets the text of that name's highest
**active** version, as BitBrat's ``personalityStore.getActive`` does, but with ``version``
compared as a number (BitBrat's Postgres store sorts it as text, so 9 beats 10 there).

It is the owner of the ``personalities`` table, in ``db/`` because a personality is what the bot
is told to be, not anything it remembers of a user; the graph asks through the
:class:`Personalities` seam, and ``memory/wiring.py`` opens the lookup with the memory services.

The functions take a connection or a pool; :class:`PersonalityLookup` is the run-time lookup
with BitBrat's in-process cache (5 minutes, hits only: a missing name is asked again).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from llm_bot.clock import utc_now
from llm_bot.text import UNSTORABLE

STATUSES = ("active", "inactive", "archived")
MAX_VERSION = 2**31 - 1  # the column is a Postgres integer
_FIELDS = (
    "name, version, status, text, platform, model, tags, description, author,"
    " created_at, updated_at"
)
Source = AsyncConnection[Any] | AsyncConnectionPool[Any]


class InvalidPersonality(ValueError):
    """A personality document that cannot be stored; the message says which field and why."""


@dataclass(frozen=True)
class Personality:
    name: str
    version: int
    status: str
    text: str
    platform: str | None = None
    model: str | None = None
    tags: tuple[str, ...] | None = None
    description: str | None = None
    author: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def document(self) -> dict[str, Any]:
        """BitBrat's JSON shape (camelCase times), unset fields left out."""
        fields = {
            "name": self.name,
            "version": self.version,
            "status": self.status,
            "text": self.text,
            "platform": self.platform,
            "model": self.model,
            "tags": list(self.tags) if self.tags is not None else None,
            "description": self.description,
            "author": self.author,
            "createdAt": self.created_at.isoformat() if self.created_at else None,
            "updatedAt": self.updated_at.isoformat() if self.updated_at else None,
        }
        return {key: value for key, value in fields.items() if value is not None}


class Personalities(Protocol):
    """What the graph needs: the active personality of a name, or None."""

    async def active(self, name: str) -> Personality | None: ...


@asynccontextmanager
async def _connected(source: Source) -> AsyncIterator[AsyncConnection[Any]]:
    if isinstance(source, AsyncConnection):
        yield source
    else:
        async with source.connection() as connection:
            yield connection


def _of_row(row: Mapping[str, Any]) -> Personality:
    tags = row["tags"]
    return Personality(
        name=row["name"],
        version=row["version"],
        status=row["status"],
        text=row["text"],
        platform=row["platform"],
        model=row["model"],
        tags=tuple(tags) if tags is not None else None,
        description=row["description"],
        author=row["author"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def _select(source: Source, where: str, params: tuple[Any, ...]) -> list[Personality]:
    async with _connected(source) as connection:
        cursor = connection.cursor(row_factory=dict_row)
        query = f"SELECT {_FIELDS} FROM personalities {where}"  # noqa: S608 (constant parts only)
        await cursor.execute(query, params)
        return [_of_row(row) for row in await cursor.fetchall()]


async def active(source: Source, name: str) -> Personality | None:
    """The highest active version of ``name`` (versions compared as numbers)."""
    found = await _select(
        source, "WHERE name = %s AND status = 'active' ORDER BY version DESC LIMIT 1", (name,)
    )
    return found[0] if found else None


async def list_personalities(source: Source, name: str | None = None) -> list[Personality]:
    """Every stored version (of ``name`` only, when given), by name then version."""
    if name is None:
        return await _select(source, "ORDER BY name, version", ())
    return await _select(source, "WHERE name = %s ORDER BY version", (name,))


async def get(source: Source, name: str, version: int | None = None) -> Personality | None:
    """One version of ``name``; without ``version``, its highest version whatever its status."""
    if version is None:
        found = await _select(source, "WHERE name = %s ORDER BY version DESC LIMIT 1", (name,))
    else:
        found = await _select(source, "WHERE name = %s AND version = %s", (name, version))
    return found[0] if found else None


async def put(source: Source, personality: Personality) -> Personality:
    """Store ``personality`` as its ``(name, version)``, replacing that version if it exists
    (its ``created_at`` kept unless the document gives one). Times the document leaves out
    are the caller's clock, parameters (on Citus, where this is a reference table, no clock
    function is evaluated inside ``ON CONFLICT``)."""
    check(personality)
    p = personality
    now = utc_now()
    async with _connected(source) as connection:
        cursor = connection.cursor(row_factory=dict_row)
        await cursor.execute(
            f"""
            INSERT INTO personalities ({_FIELDS})
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (name, version) DO UPDATE SET
                status = excluded.status, text = excluded.text, platform = excluded.platform,
                model = excluded.model, tags = excluded.tags,
                description = excluded.description, author = excluded.author,
                created_at = coalesce(%s, personalities.created_at),
                updated_at = excluded.updated_at
            RETURNING {_FIELDS}
            """,  # noqa: S608 (constant parts only)
            (
                p.name,
                p.version,
                p.status,
                p.text,
                p.platform,
                p.model,
                list(p.tags) if p.tags is not None else None,
                p.description,
                p.author,
                p.created_at or now,
                p.updated_at or now,
                p.created_at,
            ),
        )
        row = await cursor.fetchone()
    if row is None:
        raise RuntimeError(f"storing personality {p.name!r} returned no row")
    return _of_row(row)


async def delete(source: Source, name: str, version: int | None = None) -> int:
    """Delete one version of ``name``, or all of them without ``version``; returns how many."""
    async with _connected(source) as connection:
        if version is None:
            cursor = await connection.execute("DELETE FROM personalities WHERE name = %s", (name,))
        else:
            cursor = await connection.execute(
                "DELETE FROM personalities WHERE name = %s AND version = %s", (name, version)
            )
        return cursor.rowcount


async def next_version(source: Source, name: str) -> int:
    async with _connected(source) as connection:
        cursor = await connection.execute(
            "SELECT coalesce(max(version), 0) + 1 FROM personalities WHERE name = %s", (name,)
        )
        row = await cursor.fetchone()
    return int(row[0]) if row else 1


def check(personality: Personality) -> None:
    """The table's rules, said before Postgres says them less clearly: a version its integer
    column holds, text its text columns hold (no NUL, no lone surrogate)."""
    if not personality.name.strip():
        raise InvalidPersonality("name must not be empty")
    if not personality.text.strip():
        raise InvalidPersonality(f"personality {personality.name!r}: text must not be empty")
    if personality.status not in STATUSES:
        raise InvalidPersonality(
            f"personality {personality.name!r}: status must be one of {', '.join(STATUSES)},"
            f" got {personality.status!r}"
        )
    if not 1 <= personality.version <= MAX_VERSION:
        bound = ">= 1" if personality.version < 1 else f"<= {MAX_VERSION}"
        raise InvalidPersonality(
            f"personality {personality.name!r}: version must be {bound}, got {personality.version}"
        )
    texts = [
        ("name", personality.name),
        ("status", personality.status),
        ("text", personality.text),
        ("platform", personality.platform),
        ("model", personality.model),
        ("description", personality.description),
        ("author", personality.author),
        *(("tags", tag) for tag in personality.tags or ()),
    ]
    for key, value in texts:
        found = UNSTORABLE.search(value or "")
        if found is not None:
            what = "NUL" if found.group() == "\x00" else "a lone surrogate"
            raise InvalidPersonality(f"personality {personality.name!r}: {key} holds {what}")


def import_document(document: object) -> Personality:
    """A BitBrat personality document (``personality.v1.schema.json``) as a
    :class:`Personality`. ``name``, ``text`` and ``status`` are required; ``version`` defaults to
    1. The schema's ``name`` pattern (``^[a-z0-9_]+$``) is not enforced: BitBrat's own
    ``lurk_personality.json`` is named ``lurk-master`` and its runtime never checks it."""
    if not isinstance(document, dict):
        raise InvalidPersonality(
            f"a personality document is a JSON object, got {type(document).__name__}"
        )
    label = repr(document["name"]) if isinstance(document.get("name"), str) else "document"
    missing = [key for key in ("name", "text", "status") if key not in document]
    if missing:
        raise InvalidPersonality(f"personality {label}: missing required {', '.join(missing)}")

    def text_field(key: str, required: bool = False) -> str | None:
        value = document.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str):
            raise InvalidPersonality(f"personality {label}: {key} must be a string")
        return value

    version = document.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidPersonality(f"personality {label}: version must be an integer")
    tags = document.get("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)
    ):
        raise InvalidPersonality(f"personality {label}: tags must be a list of strings")
    personality = Personality(
        name=text_field("name", True) or "",
        version=version,
        status=text_field("status", True) or "",
        text=text_field("text", True) or "",
        platform=text_field("platform"),
        model=text_field("model"),
        tags=tuple(tags) if tags is not None else None,
        description=text_field("description"),
        author=text_field("author"),
        created_at=_time(document.get("createdAt"), label, "createdAt"),
        updated_at=_time(document.get("updatedAt"), label, "updatedAt"),
    )
    check(personality)
    return personality


def _time(value: object, label: str, key: str) -> datetime | None:
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidPersonality(
            f"personality {label}: {key} must be an ISO 8601 date-time"
        ) from None


class PersonalityLookup:
    """:func:`active` behind BitBrat's cache: a found personality is kept ``ttl_s`` seconds
    (``PERSONALITY_CACHE_TTL_MS``) per name; a missing one is looked up again next time."""

    def __init__(
        self,
        connect: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, Personality]] = {}

    async def active(self, name: str) -> Personality | None:
        now = self._clock()
        cached = self._cache.get(name)
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        async with self._connect() as connection:
            found = await active(connection, name)
        if found is None:
            self._cache.pop(name, None)
        else:
            self._cache[name] = (now, found)
        return found
