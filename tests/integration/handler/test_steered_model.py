"""A prompt-injected model emits whatever tool calls it likes: through the handler (messages
in and out, the local model server scripting the calls), it cannot flood one user's memory,
push out the facts the user gave first, or reach across from a shared channel into what was
said in a DM."""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import AsyncConnection

from llm_bot.clock import utc_now
from llm_bot.events.models import Egress, InternalEventV2
from llm_bot.lifecycle.retention import RetentionPolicy, maintain
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration

GENUINE = "Ada is allergic to peanuts"


def direct(bus: MemoryBus, text: str, user: str) -> InternalEventV2:
    event = prompt_event(text, user=user, thread="inbox", egress_topic=bus.egress_topic)
    event.egress.type = "dm"
    return event


def cue(tool: str, **arguments: Any) -> str:
    """A user text that makes the local model call ``tool`` (its ``[[tool:...]]`` cue)."""
    return f"[[tool:{tool} {json.dumps(arguments)}]]"


def memories(url: str, user: str) -> dict[str, tuple[str, str]]:
    """key -> (content, visibility) of ``user``'s memories."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT key, content, visibility FROM memories WHERE user_id = %s", (user,)
        ).fetchall()
    return {key: (content, visibility) for key, content, visibility in rows}


def flood(model_server: LocalModelServer, rounds: int, calls: int) -> None:
    """``rounds`` model turns of ``calls`` upsertMemory calls each, every fact a new one."""
    for _ in range(rounds):
        model_server.script_tool_calls(
            ("upsertMemory", {"content": f"injected fact {uuid4().hex}"}) for _ in range(calls)
        )


def tool_results(model_server: LocalModelServer) -> list[str]:
    return [
        str(message["content"])
        for request in model_server.chat_requests()
        for message in request["messages"]
        if message["role"] == "tool"
    ]


async def test_tool_calls_per_turn_and_memories_per_user_are_capped_and_the_first_facts_stay(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    settings = {"MEMORY_MAX_WRITES_PER_EVENT": "100", "RETENTION_MEMORIES_PER_USER": "25"}
    bus = make_bus(migrated_database_url, settings)
    egress = bus.tap(bus.egress_topic)
    user = f"ada-{uuid4().hex[:8]}"
    async with bus.serving(bus.settings()) as worker:
        bus.publish_event(direct(bus, cue("upsertMemory", content=GENUINE) + " remember", user))
        await egress.take(1, timeout_s=60)
        flood(model_server, rounds=2, calls=30)
        bus.publish_event(direct(bus, "what's new?", user))
        await egress.take(1, timeout_s=60)
        # 10 calls of each turn ran: 20 new memories, where 60 were asked for.
        assert len(memories(migrated_database_url, user)) == 1 + 20

        model_server.clear()
        flood(model_server, rounds=2, calls=30)
        bus.publish_event(direct(bus, "and now?", user))
        await egress.take(1, timeout_s=60)
        assert worker.stats.outcome_ok == 3
    stored = memories(migrated_database_url, user)
    assert len(stored) == 25  # the user's cap, at write time
    assert (GENUINE, "dm") in stored.values()
    assert any("this user has 25 memories" in result for result in tool_results(model_server))

    # A cap lowered later: maintain deletes the most recently created, not the first facts.
    policy = RetentionPolicy(0, 0, 0, memories_per_user=5, batch_rows=1_000)
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as connection:
        await maintain(connection, policy, utc_now(), lambda line: None)
    kept = memories(migrated_database_url, user)
    assert len(kept) == 5
    assert (GENUINE, "dm") in kept.values()


async def test_memory_writes_per_event_are_capped(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    bus = make_bus(migrated_database_url, {})
    egress = bus.tap(bus.egress_topic)
    user = f"bo-{uuid4().hex[:8]}"
    flood(model_server, rounds=3, calls=10)
    async with bus.serving(bus.settings()):
        bus.publish_event(direct(bus, "hi", user))
        await egress.take(1, timeout_s=60)
    assert len(memories(migrated_database_url, user)) == 20  # of 30 asked for
    refusals = [r for r in tool_results(model_server) if "already made 20 memory writes" in r]
    assert len(refusals) == 10  # the third turn's calls, each answered with the reason


async def test_a_shared_channel_never_sees_merges_or_touches_a_dm_memory(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    bus = make_bus(migrated_database_url, {})
    egress = bus.tap(bus.egress_topic)
    user = f"cy-{uuid4().hex[:8]}"
    secret = "Cy is being treated for depression"
    room = f"lobby-{uuid4().hex[:6]}"

    def shared(text: str) -> InternalEventV2:
        return prompt_event(text, user=user, thread=room, egress_topic=bus.egress_topic)

    async with bus.serving(bus.settings()):
        bus.publish_event(direct(bus, cue("upsertMemory", content=secret) + " note it", user))
        await egress.take(1, timeout_s=60)
        [(dm_key, _)] = memories(migrated_database_url, user).items()
        model_server.clear()

        # The same fact said in public: no merge into the DM memory, and its key is not named.
        bus.publish_event(shared(cue("upsertMemory", content=secret)))
        bus.publish_event(shared(cue("deleteMemory", key=dm_key)))
        bus.publish_event(shared(cue("upsertMemory", content="Cy is fine", key=dm_key)))
        await egress.take(3, timeout_s=60)
    results = tool_results(model_server)
    assert not any(f"saved memory {dm_key}" in result for result in results), results
    assert sum(f"no memory with key {dm_key}" in result for result in results) == 2, results
    stored = memories(migrated_database_url, user)
    assert stored[dm_key] == (secret, "dm")
    assert sorted(stored.values()) == sorted([(secret, "dm"), (secret, "public")])


async def test_a_dm_whose_egress_a_rule_replaced_stays_private(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    """BitBrat's router replaces egress with a rule's ``{destination, type}``; the event type
    still says DM, so what is learned there never shows in a shared channel."""
    bus = make_bus(migrated_database_url, {"MEMORY_SIMILARITY_THRESHOLD": "-1"})
    egress = bus.tap(bus.egress_topic)
    user = f"di-{uuid4().hex[:8]}"
    secret = "Di owes the bank forty thousand"
    event = prompt_event(
        cue("upsertMemory", content=secret) + " between us",
        user=user,
        thread="dm-channel",
        egress_topic=bus.egress_topic,
    )
    event.type = "dm.message.v1"
    event.egress = Egress(destination=bus.egress_topic, type="discord")
    async with bus.serving(bus.settings()):
        bus.publish_event(event)
        await egress.take(1, timeout_s=60)
        model_server.clear()
        bus.publish_event(
            prompt_event(
                "what do you know about me?",
                user=user,
                thread="lobby",
                egress_topic=bus.egress_topic,
            )
        )
        await egress.take(1, timeout_s=60)
    assert list(memories(migrated_database_url, user).values()) == [(secret, "dm")]
    [request] = model_server.chat_requests()
    assert "forty thousand" not in json.dumps(request["messages"])
