"""Hostile query strings on every route of the console, on a fresh database: NUL, the UTF-8 form
of a lone surrogate and other bytes that are not UTF-8, an id over the bound the worker puts on
ids, a scope that is neither ``dm`` nor ``shared``; in each parameter of each route, in a
parameter no route reads, repeated after a good value, and in every parameter at once. Each is
answered 400, never 5xx, and no view is recorded. The routes walked are the app's own
(:func:`llm_bot.console.app.pages`): a route without a row in ``PARAMETERS`` fails the test.

The app is called as uvicorn calls it, with the query string as raw bytes: an HTTP client would
re-encode them (percent-encode a raw byte), and the bytes are what is under test.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Scope

from llm_bot.clock import utc_now
from llm_bot.console.app import Console, console_app, pages
from llm_bot.console.auth import BearerToken
from llm_bot.db.hybrid import QUERY_MAX_CHARS
from llm_bot.events.limits import MAX_ID_BYTES
from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
from llm_bot.memory.store import MemoryStore

from ...from_settings import settings_for

pytestmark = pytest.mark.integration

TOKEN = "inputs-test-token"
# Each route's parameters, with a value it serves; the walk makes each hostile in turn.
PARAMETERS: dict[str, dict[str, str]] = {
    "/": {"q": "ad"},
    "/user": {"id": "ada"},
    "/recall": {"id": "ada", "q": "tea", "thread": "inbox", "scope": "shared"},
    "/event": {"id": "ada", "correlation": "c-1"},
}
UNKNOWN = "later"  # a parameter no route reads yet
# Query-string forms of values no parameter may hold.
UNSTORABLE = {
    "NUL": b"%00",
    "NUL inside": b"ada%00x",
    "lone surrogate (its UTF-8 form)": b"%ED%A0%80",
    "lone surrogate, raw bytes": b"\xed\xa0\x80",
    "not UTF-8": b"%FF",
    "NUL as overlong UTF-8": b"%C0%80",
}
# Two bytes a character: over the bound in bytes, not in characters.
OVERLONG_ID = quote("é" * (MAX_ID_BYTES // 2 + 1)).encode()
LONG_QUERY = "tea " * (QUERY_MAX_CHARS // 2)


def hostile(name: str) -> dict[str, bytes]:
    """What ``name`` must not hold: any text no column can, a longer id than any, a scope that
    is neither. A long ``q`` is a message, cut rather than refused (the walk's last check)."""
    values = dict(UNSTORABLE)
    if name != "q":
        values["over MAX_ID_BYTES"] = OVERLONG_ID
    if name == "scope":
        values["neither dm nor shared"] = b"private"
    return values


def query(values: dict[str, str], **raw: bytes) -> bytes:
    """``values`` percent-encoded, with the bytes of ``raw`` as they are in place of (or after)
    them."""
    encoded = {name: quote(value).encode() for name, value in values.items()} | raw
    return b"&".join(name.encode() + b"=" + value for name, value in encoded.items())


async def get(app: ASGIApp, path: str, query_string: bytes) -> tuple[int, str]:
    """``GET`` of ``path`` with the operator's token: the status and the body."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "server": ("127.0.0.1", 8090),
        "client": ("127.0.0.1", 50000),
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "headers": [
            (b"host", b"127.0.0.1:8090"),
            (b"authorization", f"Bearer {TOKEN}".encode()),
        ],
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body.decode()


def token_console(store: MemoryStore, database_url: str) -> Console:
    """The console over ``store`` as it serves, the worker's settings, ``TOKEN`` its token."""
    settings = settings_for(database_url)
    limits = ContextLimits.from_settings(settings)
    return Console(
        store=store,
        retriever=PostgresMemoryRetriever(store, limits, settings.agent_name, utc_now),
        limits=limits,
        agent=settings.agent_name,
        authenticators=[BearerToken(TOKEN)],
        clock=utc_now,
        basic_realm=True,
    )


async def views(store: MemoryStore) -> int:
    async with store.connection() as connection, connection.cursor() as cursor:
        await cursor.execute("SELECT count(*) AS n FROM console_views")
        row = await cursor.fetchone()
    assert row is not None
    return int(row["n"])


async def test_no_hostile_query_reaches_the_database_on_any_route(
    memory_store: MemoryStore, migrated_database_url: str
) -> None:
    console = token_console(memory_store, migrated_database_url)
    routes = [route.path for route in pages(console) if isinstance(route, Route)]
    assert sorted(routes) == sorted(PARAMETERS), "every route needs its row in PARAMETERS"
    app = console_app(console)

    cases: list[tuple[str, str, bytes, str | None]] = []  # path, case, query, name refused
    for path, values in PARAMETERS.items():
        for name in [*values, UNKNOWN]:
            for what, value in hostile(name).items():
                cases.append((path, f"{name}: {what}", query(values, **{name: value}), name))
        good_then_bad = query(values) + b"&" + query({}, id=b"%00")
        cases.append((path, "id twice, the second NUL", good_then_bad, "id"))
        every = {name: b"%00" for name in values}
        cases.append((path, "every parameter NUL", query(values, **every), None))

    before = await views(memory_store)
    failures = []
    for path, case, query_string, refused in cases:
        try:
            status, body = await get(app, path, query_string)
        except Exception as error:  # what uvicorn would answer 500
            failures.append(f"{path} {case}: {error!r}")
            continue
        if status != 400 or (refused is not None and repr(refused) not in body):
            failures.append(f"{path} {case}: {status} {body[:80]!r}")
    assert not failures, "\n".join(failures)
    assert await views(memory_store) == before

    # The same routes with good values: served, and each page of a user's data recorded.
    for path, values in PARAMETERS.items():
        status, body = await get(app, path, query(values))
        assert status == 200, (path, body[:200])
    assert await views(memory_store) == before + 3
    # A recall query longer than the worker's searches read is cut to what they read, not refused.
    status, body = await get(app, "/recall", query({"id": "ada", "q": LONG_QUERY}))
    assert status == 200
    assert f'value="{LONG_QUERY[:QUERY_MAX_CHARS]}"' in body
