"""Memory consolidation through a running worker: sessions close, jobs go over the emulator's
consolidation topic, the local model server scripts the extraction, and the database shows
what was derived. A session is closed by moving its turns' times back past
``SESSION_IDLE_SECONDS`` (an hour here): the turns then carry a time days before the job runs,
so a fact dated by its sources is told apart from one dated by its processing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from llm_bot.events.identity import thread_id_of
from llm_bot.events.models import InternalEventV2
from llm_bot_tools.devstack.worker_harness import (
    Bus,
    running_worker,
    wait_until,
)
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = pytest.mark.integration

SHIFT = timedelta(days=10)
WORKER_SETTINGS = {
    "LLM_BOT_CONSOLIDATION": "true",
    "LLM_BOT_CONSOLIDATION_SWEEP_S": "0.2",
    "SESSION_IDLE_SECONDS": "3600",
    "LLM_BOT_CONSOLIDATION_DEADLINE_S": "5",
    "LLM_BOT_MAX_DELIVERY_ATTEMPTS": "3",
}


def dm_event(text: str, bus: Bus, user: str = "ada") -> InternalEventV2:
    event = prompt_event(text, user=user, thread="home", egress_topic=bus.egress_topic)
    event.type = "dm.message.v1"
    return event


def database_url(bus: Bus) -> str:
    return bus.environment["DATABASE_URL"]


def rows(bus: Bus, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(database_url(bus), row_factory=dict_row) as connection:
        return connection.execute(sql, params).fetchall()


def close_sessions(bus: Bus) -> None:
    """Every thread's session silent since ``SHIFT`` ago: its turns and row moved back."""
    with psycopg.connect(database_url(bus)) as connection:
        connection.execute("UPDATE conversation_turns SET created_at = created_at - %s", (SHIFT,))
        connection.execute(
            "UPDATE conversation_threads SET last_turn_at = last_turn_at - %s", (SHIFT,)
        )


def extraction(facts: list[dict[str, Any]], summary: str | None = "Ada's move.") -> str:
    return json.dumps({"facts": facts, "summary": summary})


def extraction_requests(model_server: LocalModelServer) -> list[dict[str, Any]]:
    return [
        body
        for body in model_server.chat_requests()
        if str(body["messages"][0]["content"]).startswith("You consolidate")
    ]


def memories_of(bus: Bus, user: str) -> list[dict[str, Any]]:
    return rows(
        bus,
        "SELECT key, content, metadata, visibility, updated_at FROM memories"
        " WHERE user_id = %s ORDER BY content",
        user,
    )


def summaries_of(bus: Bus, user: str) -> list[dict[str, Any]]:
    return rows(
        bus,
        "SELECT thread_id, seq, content, visibility FROM conversation_turns"
        " WHERE user_id = %s AND role = 'summary'",
        user,
    )


def job_records(bus: Bus) -> list[dict[str, Any]]:
    return rows(
        bus,
        "SELECT correlation_id, outcome, published FROM processed_events"
        " WHERE step_key = 'consolidate'",
    )


async def answered_session(
    bus: Bus, model_server: LocalModelServer, reply: str, user: str = "ada"
) -> str:
    """Two DM pairs of ``user`` (seqs 1-4), the first answered "You said you live in Oslo.";
    then the extraction's ``reply`` scripted and the session closed. The thread's id."""
    egress = bus.tap(bus.egress_topic)
    model_server.script_reply("You said you live in Oslo.")
    first = dm_event("I moved to Bergen last week.", bus, user)
    bus.publish_event(first)
    await egress.take(1, timeout_s=30)
    bus.publish_event(dm_event("My sister is called Ingrid.", bus, user))
    await egress.take(1, timeout_s=30)
    model_server.script_reply(reply)
    close_sessions(bus)
    return thread_id_of(first)


async def test_a_closed_dm_session_becomes_private_facts_of_the_users_own_words_dated_by_them(
    bus: Bus, model_server: LocalModelServer
) -> None:
    async with running_worker(bus.settings(**WORKER_SETTINGS)):
        reply = extraction(
            [
                {"text": "Moved to Bergen on 2026-11-09.", "sources": [1]},
                {"text": "Has a sister called Ingrid.", "sources": [3]},
                # The assistant's words, alone or beside the user's, are no user fact.
                {"text": "Lives in Oslo.", "sources": [2]},
                {"text": "Lives in Oslo and Bergen.", "sources": [1, 2]},
            ]
        )
        thread = await answered_session(bus, model_server, reply)
        await wait_until(lambda: len(summaries_of(bus, "ada")) == 1, 30, "the job's writes")

    turns = rows(
        bus,
        "SELECT seq, created_at FROM conversation_turns WHERE user_id = 'ada' AND seq > 0"
        " ORDER BY seq",
    )
    at = {row["seq"]: row["created_at"] for row in turns}
    facts = memories_of(bus, "ada")
    assert [fact["content"] for fact in facts] == [
        "Has a sister called Ingrid.",
        "Moved to Bergen on 2026-11-09.",
    ]
    sister, move = facts
    assert {fact["visibility"] for fact in facts} == {"dm"}
    assert move["metadata"]["sourceTurns"] == "1"
    assert sister["metadata"]["sourceTurns"] == "3"
    assert move["metadata"]["derivedFrom"] == thread
    # Dated by the turn that says it, ten days back, not by the job's run.
    assert move["updated_at"] == at[1]
    assert datetime.fromisoformat(move["metadata"]["observedAt"]) == at[1]
    [prompt] = extraction_requests(model_server)
    assert at[1].date().isoformat() in prompt["messages"][1]["content"]
    assert summaries_of(bus, "ada") == [
        {"thread_id": thread, "seq": -4, "content": "Ada's move.", "visibility": "dm"}
    ]
    assert job_records(bus) == [
        {"correlation_id": f"consolidate:{thread}:0-4", "outcome": "OK", "published": True}
    ]
    assert rows(bus, "SELECT consolidated_seq FROM conversation_threads") == [
        {"consolidated_seq": 4}
    ]
