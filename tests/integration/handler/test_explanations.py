"""Why an answer is what it is, through the handler: each answered event leaves an explanation
naming the memory key with the version it saw and the recalled turns with their scores;
`llm-bot explain` shows the prompt part by part, labelled, then what was left out; in a shared
channel a DM memory is only counted; once a speaker is forgotten, another user's explanation
that cited their words shows them as erased, as does a stored output that does not decode; with
LLM_BOT_EXPLANATIONS off nothing is stored."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from llm_bot.cli import main
from llm_bot.explanation.reader import explanation_for
from llm_bot.explanation.view import Explanation
from llm_bot.memory.derived import derived_metadata
from llm_bot.memory.store import put_memory
from llm_bot.memory.wiring import open_memory_store

from ...support.conversation import say, upsert
from ...support.memory_bus import MemoryBus
from .analyzed import analysis, answers, chat_event
from .conftest import BusFactory

pytestmark = pytest.mark.integration

# One pair of window, so the older turns of a conversation are recalled, not windowed; every
# recalled turn counts (the local embeddings are not calibrated).
SETTINGS = {
    "CONTEXT_PAIRS": "1",
    "MEMORY_SIMILARITY_THRESHOLD": "-1",
    "LLM_BOT_SHUTDOWN_GRACE_S": "5",
}


@pytest.fixture
def explaining_bus(make_bus: BusFactory, migrated_database_url: str) -> MemoryBus:
    return make_bus(migrated_database_url, SETTINGS)


async def explained(url: str, correlation_id: str) -> Explanation:
    """The explanation as the console reads it, on a connection that makes dicts of rows (the
    memory store's pool); ``llm-bot explain`` reads it on one of tuples."""
    connect = AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    async with await connect as connection:
        explanation = await explanation_for(connection, correlation_id)
    assert explanation is not None
    return explanation


async def only_key(bus: MemoryBus, user: str) -> str:
    async with open_memory_store(bus.settings()) as store:
        (memory,) = await store.for_user(user).list_memories()
    return memory.key


def labelled(explanation: Explanation, prefix: str) -> list[dict[str, Any]]:
    return [part.as_json() for part in explanation.parts if part.label.startswith(prefix)]


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command's exit code and output (the CLI runs its own event loop, so in a thread)."""
    try:
        code = await asyncio.to_thread(main, [*argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_a_dm_answer_names_the_memory_version_it_saw_and_the_turns_it_recalled(
    explaining_bus: MemoryBus,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bus, url = explaining_bus, migrated_database_url
    async with bus.serving(bus.settings()):
        await say(
            bus, "ada", f"{upsert('Ada is vegetarian')} I cook a lot", thread="inbox", dm=True
        )
        key = await only_key(bus, "ada")
        await say(
            bus, "ada", f"{upsert('Ada is vegan', key)} no eggs either", thread="inbox", dm=True
        )
        await say(bus, "ada", "I bought lentils today", thread="inbox", dm=True)
        asked = await say(bus, "ada", "what should I cook tonight?", thread="inbox", dm=True)
        # The fact changes again after the answer: the explanation keeps the version it saw.
        await say(bus, "ada", f"{upsert('Ada eats fish again', key)} ok", thread="inbox", dm=True)

    explanation = await explained(url, asked)
    (memory,) = labelled(explanation, f"Memory {key}")
    assert memory["label"] == f"Memory {key} (version 2)"
    assert (memory["state"], memory["text"]) == ("shown", "Ada is vegan")
    assert "dense rank 1" in memory["why"]
    recalled = labelled(explanation, "Recalled message")
    assert recalled, explanation.as_json()
    assert all("similarity" in part["why"] and "fused" in part["why"] for part in recalled)
    assert any("dense rank" in part["why"] for part in recalled)
    assert any(part["text"] == f"{upsert('Ada is vegetarian')} I cook a lot" for part in recalled)
    (words,) = labelled(explanation, "Input")
    assert words["text"] == "what should I cook tonight?"
    assert explanation.decision is not None
    assert explanation.decision["gate"] == "PROCEED"
    assert explanation.answer

    monkeypatch.setenv("DATABASE_URL", url)
    code, out, _ = await cli(capsys, "explain", asked)
    assert code == 0
    for label in ("[System Prompt]", "[Requesting User]", "[Input]", f"[Memory {key} (version 2)]"):
        assert label in out
    assert out.index("== Memory context ==") < out.index("== User message ==")
    assert out.index("== User message ==") < out.index("== Left out ==") < out.index("== Answer ==")
    code, out, _ = await cli(capsys, "explain", asked, "--json")
    assert code == 0
    assert json.loads(out) == json.loads(json.dumps(explanation.as_json()))


async def test_a_dm_memory_is_counted_in_a_shared_channel_never_shown(
    explaining_bus: MemoryBus, migrated_database_url: str
) -> None:
    bus = explaining_bus
    async with bus.serving(bus.settings()):
        await say(
            bus, "ada", f"{upsert('Ada is allergic to peanuts')} noted", thread="inbox", dm=True
        )
        asked = await say(bus, "ada", "any snack ideas for the party?", thread="lobby", dm=False)

    explanation = await explained(migrated_database_url, asked)
    assert explanation.left_out.get("another_scope") == 1, explanation.as_json()
    assert not labelled(explanation, "Memory")
    assert "peanuts" not in json.dumps(explanation.as_json())


async def test_a_turn_a_correction_moved_names_the_turn_it_traded_places_with(
    explaining_bus: MemoryBus, migrated_database_url: str
) -> None:
    """Consolidation recorded that Ada's number changed: the fact first cited the pair that
    told the old number, its current text the pair that told the new one. Recall then ranks
    the old statement no higher than the correction and the correction's pair where the old
    one stood; the explanation of the next answer says so on each turn moved, since its
    similarity alone would not."""
    bus, url = explaining_bus, migrated_database_url
    async with bus.serving(bus.settings()):
        await say(bus, "ada", "my phone number is 0471 22 90 13", thread="inbox", dm=True)
        await say(bus, "ada", "the weather is grey today", thread="inbox", dm=True)
        await say(bus, "ada", "I changed it, it is 0472 31 18 44 now", thread="inbox", dm=True)
        await say(bus, "ada", "off to the market", thread="inbox", dm=True)
        async with await AsyncConnection.connect(url, autocommit=True) as db:
            rows = await db.execute(
                "SELECT thread_id, seq, created_at FROM conversation_turns"
                " WHERE role = 'user' ORDER BY created_at"
            )
            (thread, told, told_at), _, (_, changed, changed_at), _ = await rows.fetchall()
            for seq, at, number in (
                (told, told_at, "0471 22 90 13"),
                (changed, changed_at, "0472 31 18 44"),
            ):
                metadata = derived_metadata(thread, f"0-{seq}", [seq], at)
                text = f"Ada's phone number is {number}"
                await put_memory(db, "ada", "phone", text, metadata, "dm", None, at)
        asked = await say(bus, "ada", "what is my phone number?", thread="inbox", dm=True)

    recalled = {
        part["label"]: part["why"] for part in labelled(await explained(url, asked), "Recalled")
    }
    old, reply = f"Recalled message {thread}#{told}", f"Recalled message {thread}#{changed + 1}"
    assert f"corrected by {thread}#{changed}, ranked no higher" in recalled[old], recalled
    assert f"corrects {thread}#{told + 1}, ranked in its place" in recalled[reply], recalled
    assert sum("correct" in why for why in recalled.values()) == 3, recalled


async def test_a_forgotten_speakers_words_are_erased_from_another_users_explanation(
    explaining_bus: MemoryBus,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bus, url = explaining_bus, migrated_database_url
    marker = f"zq{uuid4().hex[:8]}"
    async with bus.serving(bus.settings()):
        await say(bus, "bob", f"hello room, {marker} here", thread="lobby", dm=False)
        asked = await say(bus, "ada", "what did bob say?", thread="lobby", dm=False)

    before = labelled(await explained(url, asked), "Window")
    assert any(marker in (part["text"] or "") for part in before), before

    monkeypatch.setenv("DATABASE_URL", url)
    code, _, _ = await cli(capsys, "forget-user", "bob", "--json")
    assert code == 0
    after = await explained(url, asked)
    window = labelled(after, "Window")
    assert [part["label"] for part in window] == [part["label"] for part in before]
    assert "erased" in [part["state"] for part in window]
    code, out, _ = await cli(capsys, "explain", asked)
    assert code == 0
    assert "(erased)" in out
    assert marker not in out
    with psycopg.connect(url) as db:
        rows = db.execute("SELECT user_id, record::text FROM answer_explanations").fetchall()
    assert rows
    assert all(
        user != "bob" and "bob" not in record and marker not in record for user, record in rows
    )


async def test_a_turn_written_after_the_answer_under_an_id_it_cited_is_shown_as_erased(
    explaining_bus: MemoryBus,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ada's DM answer recalls what she said in the lobby; the lobby is forgotten, and carol
    begins it again, her words under the ids ada's turns had: ada's explanation shows those
    turns as erased, not carol's words as what ada's answer was given."""
    bus, url = explaining_bus, migrated_database_url
    marker = f"zq{uuid4().hex[:8]}"
    async with bus.serving(bus.settings()):
        await say(bus, "ada", "I am vegetarian", thread="lobby", dm=False)
        asked = await say(bus, "ada", "am I vegetarian?", thread="inbox", dm=True)
        before = labelled(await explained(url, asked), "Recalled message cli:lobby#")
        assert [part["state"] for part in before] == ["shown", "shown"], before
        monkeypatch.setenv("DATABASE_URL", url)
        code, _, _ = await cli(capsys, "forget-thread", "cli:lobby", "--json")
        assert code == 0
        await say(bus, "carol", f"my password hint is {marker}", thread="lobby", dm=False)

    after = labelled(await explained(url, asked), "Recalled message cli:lobby#")
    assert [part["label"] for part in after] == [part["label"] for part in before]
    assert [(part["state"], part["text"]) for part in after] == [("erased", None)] * 2, after
    code, out, _ = await cli(capsys, "explain", asked)
    assert code == 0
    assert marker not in out


async def test_explain_prints_no_control_character_of_an_event_to_the_terminal(
    explaining_bus: MemoryBus,
    migrated_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A channel's name is the event's, so the window's labels hold whatever it holds: an
    escape sequence in it reaches the operator's terminal escaped."""
    bus, url = explaining_bus, migrated_database_url
    room = "lob\x1b]0;pwned\x07by\u202e"
    async with bus.serving(bus.settings()):
        await say(bus, "ada", "hello room", thread=room, dm=False)
        asked = await say(bus, "ada", "hello again", thread=room, dm=False)

    monkeypatch.setenv("DATABASE_URL", url)
    code, out, _ = await cli(capsys, "explain", asked)
    assert code == 0
    assert "[Window cli:lob\\u001b]0;pwned\\u0007by\\u202e#1]" in out, out
    assert not any(character in out for character in "\x1b\x07\u202e")


async def test_a_stored_output_that_does_not_decode_shows_the_words_and_answer_as_erased(
    explaining_bus: MemoryBus, migrated_database_url: str
) -> None:
    """The words asked and the answer are read from the stored output as every event is read
    (the codec): bytes that are not UTF-8, or JSON that is no event, show nothing of either."""
    bus, url = explaining_bus, migrated_database_url
    async with bus.serving(bus.settings()):
        asked = await say(bus, "ada", "what should I cook tonight?", thread="inbox", dm=True)
    for output in (b"\xff", b"[1, 2]"):
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(
                "UPDATE processed_events SET output_data = %s WHERE correlation_id = %s",
                (output, asked),
            )
        explanation = await explained(url, asked)
        (words,) = labelled(explanation, "Input")
        assert (words["state"], words["text"]) == ("erased", None), output
        assert explanation.answer is None


async def test_with_explanations_off_none_is_stored(
    make_bus: BusFactory, migrated_database_url: str
) -> None:
    bus = make_bus(migrated_database_url, {**SETTINGS, "LLM_BOT_EXPLANATIONS": "false"})
    async with bus.serving(bus.settings()):
        await say(bus, "ada", "hello", thread="inbox", dm=True)
    with psycopg.connect(migrated_database_url) as db:
        assert db.execute("SELECT count(*) FROM answer_explanations").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM processed_events").fetchone() == (1,)


async def test_explain_with_a_bad_argument_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = await cli(capsys, "explain", "some-id", "--bogus")
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert "--bogus" in err


async def test_a_refusal_is_explained_by_the_behaviour_decision_alone(
    explaining_bus: MemoryBus, migrated_database_url: str
) -> None:
    """The gate refused before any memory was read: the explanation holds the decision, with
    the rule that refused, and no prompt (none was sent)."""
    bus = explaining_bus
    event = chat_event(bus, analysis(level="low", kind="self_harm"))
    async with bus.serving(bus.settings()):
        await answers(bus, [event])
    explanation = await explained(migrated_database_url, event["correlationId"])
    assert explanation.decision is not None
    assert explanation.decision["gate"] == "SAFE_REFUSAL"
    assert explanation.decision["risk"] == ["low", "self_harm"]
    assert "should_refuse" in explanation.decision["rules"]
    assert explanation.parts == ()
    assert explanation.answer  # BitBrat's canned refusal, read from the stored output
