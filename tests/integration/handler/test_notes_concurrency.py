"""Two events of one user edit the notes while both are in flight: the one that commits last
applies its edits to the document as the first left it, so no edit is lost, and an edit from a
shared channel never lands on notes that became private in the meantime.

The interleaving is made, not hoped for: the first event's second model call (after its tool
read the notes) is held by the local model server while the second event runs and commits."""

from __future__ import annotations

import asyncio
import json
import time
from uuid import uuid4

import psycopg
import pytest

from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration

HOLD_S = 4.0


def notes_cue(operation: str, content: str) -> str:
    arguments = json.dumps({"operation": operation, "content": content})
    return f"[[tool:manage_long_term_memory {arguments}]]"


def notes_of(url: str, user: str) -> tuple[str, str] | None:
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT content, visibility FROM agent_notes WHERE user_id = %s", (user,)
        ).fetchone()
    return None if row is None else (row[0], row[1])


async def wait_for_generation_calls(model_server: LocalModelServer, count: int) -> None:
    """Until the server has received ``count`` model calls (the first event's tool ran)."""
    deadline = time.monotonic() + 30
    while len(model_server.chat_requests()) < count:
        assert time.monotonic() < deadline, "the first event never reached its second call"
        await asyncio.sleep(0.05)


async def interleave(
    bus: MemoryBus,
    model_server: LocalModelServer,
    first: InternalEventV2,
    second: InternalEventV2,
) -> None:
    """``first`` reads the notes, ``second`` runs and commits, then ``first`` commits."""
    egress = bus.tap(bus.egress_topic)
    model_server.hang_next(1, 0.0)  # the first event's tool call comes at once
    model_server.hang_next(1, HOLD_S)  # its answer, after the tool read the notes, waits
    async with bus.serving(bus.settings()):
        bus.publish_event(first)
        await wait_for_generation_calls(model_server, 2)
        bus.publish_event(second)
        [answer] = await egress.take(1, timeout_s=60)
        assert json.loads(answer.data)["correlationId"] == second.correlation_id
        await egress.take(1, timeout_s=60)


async def test_two_events_appending_at_once_keep_both_edits(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    bus = make_bus(migrated_database_url, {})
    user = f"ed-{uuid4().hex[:8]}"

    def said(text: str) -> InternalEventV2:
        event = prompt_event(text, user=user, thread="inbox", egress_topic=bus.egress_topic)
        event.egress.type = "dm"
        return event

    await interleave(
        bus,
        model_server,
        said(notes_cue("append", "# Pets\nhas a cat")),
        said(notes_cue("append", "# Work\nis a nurse")),
    )
    notes = notes_of(migrated_database_url, user)
    assert notes is not None
    assert "has a cat" in notes[0], notes
    assert "is a nurse" in notes[0], notes


async def test_a_shared_overwrite_committed_after_a_dm_append_leaves_the_dm_note(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    bus = make_bus(migrated_database_url, {})
    user = f"fi-{uuid4().hex[:8]}"
    in_room = prompt_event(
        notes_cue("overwrite", "# About\nlikes jazz"),
        user=user,
        thread=f"lobby-{uuid4().hex[:6]}",
        egress_topic=bus.egress_topic,
    )
    in_dm = prompt_event(
        notes_cue("append", "# Health\nin therapy for anxiety"),
        user=user,
        thread="inbox",
        egress_topic=bus.egress_topic,
    )
    in_dm.egress.type = "dm"
    await interleave(bus, model_server, in_room, in_dm)
    assert notes_of(migrated_database_url, user) == ("# Health\nin therapy for anxiety", "dm")
