"""Erasure you can prove: two users fill every table through the handler (DMs, a shared
channel, memories, notes) and an operator's console views each (the audit the console writes);
`llm-bot export-user` hands one of them all of it; `llm-bot
forget-user` then leaves none of their ids or words in any column of any table of the schema,
found from the catalog (a table added later is scanned too), and the other user keeps all."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.clock import utc_now
from llm_bot.db.console_views import record_view
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from ...support.scan import occurrences

pytestmark = pytest.mark.integration


def said(bus: MemoryBus, user: str, marker: str, room: str) -> list[str]:
    """Publish what ``user`` says (a memory, notes and words in a DM, words in ``room``),
    each carrying ``marker``; returns the correlation ids."""
    memory = json.dumps({"content": f"{user} collects {marker}memory figurines"})
    notes = json.dumps({"operation": "append", "content": f"# Hobbies\n{marker}notes"})
    direct = [
        f"[[tool:upsertMemory {memory}]] I collect {marker}dm figurines",
        f"[[tool:manage_long_term_memory {notes}]] write it down",
    ]
    ids = []
    for text in direct:
        event = prompt_event(text, user=user, thread="inbox", egress_topic=bus.egress_topic)
        event.egress.type = "dm"
        bus.publish_event(event)
        ids.append(event.correlation_id)
    shared = prompt_event(
        f"hello room, {marker}room here", user=user, thread=room, egress_topic=bus.egress_topic
    )
    bus.publish_event(shared)
    return [*ids, shared.correlation_id]


async def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """The command's JSON output (the CLI runs its own event loop, so in a thread)."""
    assert await asyncio.to_thread(main, [*argv]) == 0
    return json.loads(capsys.readouterr().out)


async def test_forget_user_leaves_nothing_of_them_and_everything_of_the_other(
    bus: MemoryBus,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = uuid4().hex[:8]
    alice, bob = f"alice-{run}", f"bob-{run}"
    alice_marker, bob_marker = f"qa{run}", f"qb{run}"
    room = f"lobby-{run}"
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()) as worker:
        published = said(bus, alice, alice_marker, room) + said(bus, bob, bob_marker, room)
        await egress.take(len(published), timeout_s=60)
        assert worker.stats.outcome_ok == len(published)

    async with await psycopg.AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
        for user, marker in ((alice, alice_marker), (bob, bob_marker)):
            await record_view(db, user, f"token:{marker}viewer", "user", utc_now())

    alice_needles = [alice, f"{alice_marker}memory", f"{alice_marker}notes", f"{alice_marker}dm"]
    alice_needles += [f"{alice_marker}room", f"{alice_marker}viewer"]
    bob_needles = [bob, f"{bob_marker}memory", f"{bob_marker}notes", f"{bob_marker}dm"]
    bob_needles += [f"{bob_marker}room", f"{bob_marker}viewer"]
    before = occurrences(migrated_database_url, alice_needles + bob_needles)
    assert all(before.values()), before  # every kind of data was written

    monkeypatch.setenv("DATABASE_URL", migrated_database_url)
    export = await cli_json(capsys, "export-user", alice)
    exported = json.dumps(export).lower()
    assert all(needle.lower() in exported for needle in alice_needles)
    assert not any(needle.lower() in exported for needle in bob_needles)
    assert set(export["tables"]) >= {"memories", "conversation_turns", "agent_notes"}
    assert [row["learned_in"] for row in export["tables"]["memories"]] == ["dm"]
    assert [row["viewer"] for row in export["tables"]["console_views"]] == [
        f"token:{alice_marker}viewer"
    ]

    receipt = await cli_json(capsys, "forget-user", alice, "--json")
    for table in ("memories", "conversation_turns", "conversation_threads"):
        assert receipt["deleted"][table] > 0, receipt
    assert receipt["deleted"]["agent_notes"] == 1
    assert receipt["deleted"]["processed_events"] == 3
    assert receipt["deleted"]["console_views"] == 1
    assert receipt["total"] == sum(receipt["deleted"].values())

    after = occurrences(migrated_database_url, alice_needles + bob_needles)
    assert {needle: after[needle] for needle in alice_needles} == dict.fromkeys(alice_needles, 0)
    assert {needle: after[needle] for needle in bob_needles} == {
        needle: before[needle] for needle in bob_needles
    }
    # Idempotent: nothing is left to delete.
    assert (await cli_json(capsys, "forget-user", alice, "--json"))["total"] == 0
