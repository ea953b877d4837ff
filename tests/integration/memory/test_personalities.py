"""Personalities by name: the store picks the highest active version (as a number), the graph
puts its text into the identity, its model into the model call, and a failing or missing
lookup never fails the event."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db import personalities as store
from llm_bot.db.personalities import Personality, PersonalityLookup
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.graph.assembly import graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...from_settings import graph_context
from ...support.answering import answer_event

pytestmark = pytest.mark.integration
GRAPH = graph_from_settings(load_settings())
NOW = "2026-11-22T12:00:00.000Z"
SYSTEM = "## [System Prompt]\n- Rules\n- system\n- Sources: config"
NO_IDENTITY = f"{SYSTEM}\n\n## [Assistant Identity]\n- None provided."


@pytest.fixture(autouse=True)
def fresh_server(chat_server: LocalModelServer) -> None:
    chat_server.reset()


def named(event: InternalEventV2, *annotations: dict[str, Any]) -> InternalEventV2:
    extra = [AnnotationV1.model_validate({"createdAt": NOW, **a}) for a in annotations]
    return event.model_copy(update={"annotations": [*(event.annotations or []), *extra]})


def said(text: str = "hello") -> InternalEventV2:
    return prompt_event(text, user="u1", thread="t1", egress_topic="internal.egress.v1")


def system_sent(server: LocalModelServer) -> str:
    content = server.chat_requests()[-1]["messages"][0]
    assert content["role"] == "system"
    return str(content["content"])


async def test_the_highest_active_version_wins_numerically(
    migrated_pool: AsyncConnectionPool[Any],
) -> None:
    for version in (9, 10, 2):
        await store.put(migrated_pool, Personality("bratty", version, "active", f"v{version}"))
    await store.put(migrated_pool, Personality("bratty", 11, "inactive", "v11"))
    await store.put(migrated_pool, Personality("bratty", 12, "archived", "v12"))
    found = await store.active(migrated_pool, "bratty")
    assert found is not None
    assert (found.version, found.text) == (10, "v10"), "10 beats 9; inactive/archived ignored"
    assert (await store.get(migrated_pool, "bratty")).version == 12  # type: ignore[union-attr]
    await store.put(migrated_pool, Personality("quiet", 1, "inactive", "shh"))
    assert await store.active(migrated_pool, "quiet") is None
    assert await store.active(migrated_pool, "nobody") is None
    assert [p.version for p in await store.list_personalities(migrated_pool, "bratty")] == [
        2,
        9,
        10,
        11,
        12,
    ]
    assert await store.delete(migrated_pool, "bratty", 10) == 1
    assert (await store.active(migrated_pool, "bratty")).version == 9  # type: ignore[union-attr]


async def test_the_lookup_caches_hits_for_five_minutes_but_not_misses(
    migrated_pool: AsyncConnectionPool[Any],
) -> None:
    now = [0.0]
    lookup = PersonalityLookup(migrated_pool.connection, 300.0, clock=lambda: now[0])
    assert await lookup.active("bratty") is None
    await store.put(migrated_pool, Personality("bratty", 1, "active", "first"))
    assert (await lookup.active("bratty")).text == "first", "a miss is not cached"  # type: ignore[union-attr]
    await store.put(migrated_pool, Personality("bratty", 2, "active", "second"))
    now[0] = 299.0
    assert (await lookup.active("bratty")).text == "first", "a hit is"  # type: ignore[union-attr]
    now[0] = 300.0
    assert (await lookup.active("bratty")).text == "second"  # type: ignore[union-attr]


async def test_a_named_personality_reaches_the_system_message_with_its_model(
    migrated_pool: AsyncConnectionPool[Any], model: ModelClient, chat_server: LocalModelServer
) -> None:
    await store.put(migrated_pool, Personality("bratty", 9, "active", "You are Bratty v9."))
    await store.put(
        migrated_pool,
        Personality("bratty", 10, "active", "You are Bratty v10.", model="bratty-model"),
    )
    await store.put(migrated_pool, Personality("bratty", 11, "inactive", "You are Bratty v11."))
    context = graph_context(
        model,
        system_prompt="system",
        personalities=PersonalityLookup(migrated_pool.connection, 300.0),
    )
    event = named(
        said(),
        {"id": "p2", "kind": "personality", "score": 2, "payload": {"text": "Be brief."}},
        {"id": "p1", "kind": "personality", "score": 1, "value": "bratty"},
        {"id": "p3", "kind": "personality", "score": 3, "payload": {"name": "missing"}},
    )
    result = await answer_event(GRAPH, context, event)
    assert result.outcome == "OK"
    assert system_sent(chat_server) == (
        f"{SYSTEM}\n\n## [Assistant Identity]\n- You are Bratty v10.\n\nBe brief."
    )
    assert chat_server.chat_requests()[-1]["model"] == "bratty-model"


async def test_without_a_store_or_with_a_failing_one_names_are_left_out(
    migrated_pool: AsyncConnectionPool[Any], model: ModelClient, chat_server: LocalModelServer
) -> None:
    await store.put(migrated_pool, Personality("bratty", 1, "active", "You are Bratty."))
    event = named(said(), {"id": "p1", "kind": "personality", "value": "bratty"})
    result = await answer_event(GRAPH, graph_context(model, system_prompt="system"), event)
    assert result.outcome == "OK"
    assert system_sent(chat_server) == NO_IDENTITY

    class Broken:
        async def active(self, name: str) -> Personality | None:
            raise ConnectionError("database down")

    context = graph_context(model, system_prompt="system", personalities=Broken())
    result = await answer_event(GRAPH, context, event)
    assert result.outcome == "OK"
    assert system_sent(chat_server) == NO_IDENTITY
    assert chat_server.chat_requests()[-1]["model"] == "local-test-model"


async def test_a_connection_works_as_well_as_a_pool(migrated_database_url: str) -> None:
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as connection:
        await store.put(connection, Personality("solo", 1, "active", "alone"))
        assert (await store.active(connection, "solo")).text == "alone"  # type: ignore[union-attr]
