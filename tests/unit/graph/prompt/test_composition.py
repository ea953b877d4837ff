"""The request in BitBrat's sections, as its llm-bot's specs assert it (``processor.spec.ts``,
``processor.personality*.spec.ts``, ``processor.story-engine.spec.ts``,
``instruction-annotation.spec.ts``) and as its assembler renders it (``assemble.ts``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llm_bot.events.codec import from_document
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.prompt.composition import (
    Identity,
    IdentityPart,
    PromptOptions,
    Request,
    prompt_options,
    request_of,
    resolve_identity,
    system_message,
)
from llm_bot.graph.prompt.story import NARRATOR
from llm_bot.settings import load_settings

from ....prompt_lines import section, section_names

CONTRACTS = Path(__file__).resolve().parents[3] / "fixtures" / "bitbrat"
# A story as BitBrat's story engine writes it into the `adventure_context` instruction.
STORY = json.loads((CONTRACTS / "adventure-context.json").read_text())
NOW = "2026-11-22T12:00:00.000Z"


def event(
    *annotations: dict[str, Any], text: str | None = "hello", **changes: Any
) -> InternalEventV2:
    document = json.loads((CONTRACTS / "chat-message.json").read_text())
    document["message"]["text"] = text
    document["annotations"] = [
        {"source": "event-router", "createdAt": NOW, **a} for a in annotations
    ]
    document["routing"]["slip"] = [{"id": "llm-bot", "status": "PENDING"}]
    for key, value in changes.items():
        document[key] = value
    return from_document(document)


PROMPT = {"id": "a1", "kind": "prompt", "value": "Say hi"}


def request(evt: InternalEventV2, options: PromptOptions | None = None) -> Request:
    found = request_of(evt, options or prompt_options(load_settings()))
    assert found is not None
    return found


def test_the_sections_come_in_bitbrats_order_and_empty_ones_say_so() -> None:
    evt = event(PROMPT)
    user = request(evt).user_message(evt)
    assert section_names(user) == [
        "## [Requesting User]",
        "## [Contexts]",
        "## [Constraints]",
        "## [Task]",
        "## [Input]",
    ]
    assert section(user, "Contexts") == section(user, "Constraints") == "- None provided."
    assert section(user, "Task") == "- (3) Say hi"
    assert user.endswith("## [Input]\nhello")


def test_the_system_message_holds_the_system_prompt_and_the_identity() -> None:
    assert system_message("BASE", "PERS") == (
        "## [System Prompt]\n- Rules\n- BASE\n- Sources: config\n\n## [Assistant Identity]\n- PERS"
    )
    assert system_message(None, "") == (
        "## [System Prompt]\n- None provided.\n\n## [Assistant Identity]\n- None provided."
    )


def test_an_instruction_counts_as_task() -> None:
    evt = event({"id": "a1", "kind": "instruction", "value": "This is a special instruction."})
    assert request(evt).task == ["This is a special instruction."]


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        (["2026-01-01T00:00:01.500Z", "2026-01-01T00:00:01Z"], "- (3) second\n\nfirst"),
        (["2026-01-01T00:00:01Z", "2026-01-01T00:00:01.000Z"], "- (3) first\n\nsecond"),  # by id
        (["2026-01-01T01:00:00+02:00", "2026-01-01T00:00:00Z"], "- (3) first\n\nsecond"),
        (["2026-01-01T00:00:00Z", "not a time"], "- (3) second\n\nfirst"),  # unreadable: first
    ],
)
def test_task_items_are_ordered_by_time_then_id(times: list[str], expected: str) -> None:
    evt = event(
        {"id": "p1", "kind": "prompt", "createdAt": times[0], "value": "first"},
        {"id": "p2", "kind": "prompt", "createdAt": times[1], "value": "second"},
    )
    assert section(request(evt).user_message(evt), "Task") == expected


def test_the_requesting_user_has_handle_user_id_roles_and_notes() -> None:
    identity = {
        "external": {"id": "ext-u1", "platform": "twitch", "displayName": "Tester"},
        "user": {
            "id": "bitbrat-u1",
            "displayName": "Gonj",
            "roles": ["vip"],
            "notes": "Prefers short answers.",
        },
    }
    message = {"id": "m1", "text": "hi", "rawPlatformPayload": {"username": "gonj_the_unjust"}}
    evt = event(PROMPT, identity=identity, message=message)
    assert section(request(evt).user_message(evt), "Requesting User") == (
        "- Handle: gonj_the_unjust\n- User ID: bitbrat-u1\n- Display Name: Gonj\n"
        "- Roles: [vip]\n- Notes: Prefers short answers."
    )


def test_a_user_context_and_a_disposition_are_notes_not_task() -> None:
    evt = event(
        PROMPT,
        {
            "id": "uc",
            "kind": "prompt",
            "source": "llm-bot.user-context",
            "label": "user-context-v1",
            "payload": {
                "text": "Username: ada\nRoles: mod, vip\nDescription: Runs the quiz.\nOther: x",
                "rolePrompts": ["Moderators get terse answers."],
            },
        },
        {"id": "dp", "kind": "prompt", "source": "llm-bot.disposition", "value": "Calm band."},
    )
    user = request(evt).user_message(evt)
    assert section(user, "Requesting User").endswith(
        "- Roles: [mod, vip]\n- Notes:\n~~~text\n"
        "Username: ada\nRoles: mod, vip\nDescription: Runs the quiz.\nCalm band.\n~~~"
    )
    assert section(user, "Task") == "- (3) Say hi\n\nModerators get terse answers."


def test_personality_lines_that_are_rules_are_also_constraints() -> None:
    """BitBrat's heuristic: a trimmed line starting so, in any case; the identity keeps them."""
    evt = event(PROMPT)
    identity = Identity(
        "You are Bratty.\n  never swear.\n- Always rhyme.\nOutput plain text.\nShoulder on.",
        constraints=("never swear.", "Output plain text.", "Shoulder on."),
    )
    user = request(evt).user_message(evt, identity)
    assert section(user, "Constraints") == (
        "- (3) never swear.\n- (3) Output plain text.\n- (3) Shoulder on."
    )


async def test_resolved_personalities_bring_their_constraint_lines() -> None:
    identity = await resolve_identity(
        [IdentityPart(text="You are Bratty.\nNever swear."), IdentityPart(text="Format: haiku")],
        None,
        timeout_s=5.0,
    )
    assert identity.text == "You are Bratty.\nNever swear.\n\nFormat: haiku"
    assert identity.constraints == ("Never swear.", "Format: haiku")


def test_guidance_and_task_lines_of_the_caller_come_first_at_priority_two() -> None:
    evt = event(PROMPT)
    user = request(evt).user_message(
        evt,
        Identity("Never swear.", constraints=("Never swear.",)),
        constraints=["Intent: question.", "Tone: neutral."],
        task_lines=["Answer the question directly."],
    )
    assert section(user, "Constraints") == (
        "- (2) Intent: question.\n- (2) Tone: neutral.\n- (3) Never swear."
    )
    assert section(user, "Task") == "- (2) Answer the question directly.\n- (3) Say hi"


def story(value: Any) -> dict[str, Any]:
    return {
        "id": "a2",
        "kind": "instruction",
        "label": "adventure_context",
        "source": "story-engine-mcp",
        "value": value,
    }


def test_a_story_is_contexts_not_task() -> None:
    evt = event({**PROMPT, "value": "You are a helpful narrator."}, story(json.dumps(STORY)))
    user = request(evt).user_message(evt)
    contexts = section(user, "Contexts")
    assert contexts == (
        "## Current Scene\nYou are in a dark alley.\n\n"
        "## Adventure Meta\n~~~text\n"
        + json.dumps({k: STORY[k] for k in ("storyId", "theme", "setting")}, indent=2)
        + "\n~~~\n\n## Available Choices\n~~~text\n"
        + json.dumps(STORY["availableChoices"], indent=2)
        + "\n~~~\n\n## World State\n~~~text\n"
        + json.dumps({"reputation": 10, "credits": 500}, indent=2)
        + "\n~~~"
    )
    assert section(user, "Task") == "- (3) You are a helpful narrator."
    assert user.index("## [Contexts]") < user.index("## [Task]")


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[1, 2]",
        json.dumps("a string"),
        '{"storyId": NaN}',
        "[" * 100 + "]" * 100,
        {"storyId": ""},
        None,
    ],
)
def test_a_malformed_story_shows_nothing_and_is_never_task(value: Any) -> None:
    evt = event(PROMPT, story(value))
    user = request(evt).user_message(evt)
    assert section(user, "Contexts") == "- None provided."
    assert section(user, "Task") == "- (3) Say hi"


def test_context_packs_by_priority_with_their_subheader() -> None:
    def pack(name: str, priority: Any, content: Any, source: str = "context-pack") -> Any:
        return {
            "id": name,
            "kind": "context",
            "source": source,
            "label": name,
            "payload": {"content": content, "priority": priority, "subheader": f"{name} v1"},
        }

    evt = event(
        PROMPT,
        pack("Rules", 3, "Be nice."),
        pack("Lore", 1, {"dragons": True}),
        pack("Other stage", 1, "not a pack", source="router"),
        pack("Empty", 1, ""),
    )
    assert section(request(evt).user_message(evt), "Contexts") == (
        'Lore v1\n## Lore\n~~~text\n{\n  "dragons": true\n}\n~~~\n\nRules v1\n## Rules\nBe nice.'
    )


def test_an_adventure_step_adds_the_narrator_last_even_without_a_prompt() -> None:
    slip = [
        {"id": "adventure", "status": "OK"},
        {"id": "llm-bot", "status": "PENDING"},
    ]
    evt = event(PROMPT, routing={"stage": "reaction", "slip": slip})
    assert request(evt).task == ["Say hi", NARRATOR]
    assert NARRATOR.startswith("You are the Narrator for a")
    alone = event(story(json.dumps(STORY)), text=None, routing={"stage": "r", "slip": slip})
    assert request(alone).task == [NARRATOR]
    assert request(alone).words == NARRATOR
    options = prompt_options(load_settings())
    assert request_of(event(story(json.dumps(STORY))), options) is None, "a story alone is no task"


def test_personalities_off_drops_them_all() -> None:
    evt = event(
        PROMPT,
        {"id": "p1", "kind": "personality", "payload": {"text": "PERS", "model": "m"}},
        {"id": "p2", "kind": "personality", "value": "bratty"},
    )
    assert request(evt).personalities != ()
    off = replace(prompt_options(load_settings()), personalities=False)
    assert request(evt, off).personalities == ()


def test_personality_count_and_length_follow_the_options() -> None:
    evt = event(
        PROMPT,
        {"id": "p1", "kind": "personality", "score": 1, "payload": {"text": "abcdef"}},
        {"id": "p2", "kind": "personality", "score": 2, "value": "bratty"},
    )
    options = PromptOptions(personalities=True, max_personalities=1, max_personality_chars=3)
    assert request(evt, options).personalities == (IdentityPart(text="abc", max_chars=3),)
    unlimited = PromptOptions(personalities=True, max_personalities=3, max_personality_chars=0)
    assert request(evt, unlimited).personalities[0].text == "abcdef"


def test_personalities_of_equal_score_follow_their_time() -> None:
    evt = event(
        PROMPT,
        {"id": "a", "kind": "personality", "createdAt": "2026-01-01T00:00:01.500Z", "value": "b"},
        {"id": "b", "kind": "personality", "createdAt": "2026-01-01T00:00:01Z", "value": "a"},
    )
    assert [p.name for p in request(evt).personalities] == ["a", "b"]
