"""Which personality annotations count, in which order, and how names are resolved (no
database: the lookup is a dict); BitBrat's personality documents read and checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_bot.db.personalities import InvalidPersonality, Personality, import_document
from llm_bot.events.models import AnnotationV1
from llm_bot.graph.prompt.composition import (
    IdentityPart,
    prompt_options,
    request_of,
    resolve_identity,
)
from llm_bot.settings import load_settings
from llm_bot_tools.local.prompt_events import prompt_event

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "bitbrat" / "personalities"
OPTIONS = prompt_options(load_settings())
CUT = OPTIONS.max_personality_chars


class Lookup:
    def __init__(self, *found: Personality) -> None:
        self.found = {p.name: p for p in found}
        self.asked: list[str] = []

    async def active(self, name: str) -> Personality | None:
        self.asked.append(name)
        if name == "broken":
            raise ConnectionError("down")
        return self.found.get(name)


def parts(*annotations: dict[str, Any]) -> tuple[IdentityPart, ...]:
    event = prompt_event("hi", user="u", thread="t", egress_topic="e")
    extra = [
        AnnotationV1.model_validate({"createdAt": "2026-01-01T00:00:00Z", **a}) for a in annotations
    ]
    event = event.model_copy(update={"annotations": [*(event.annotations or []), *extra]})
    request = request_of(event, OPTIONS)
    assert request is not None
    return request.personalities


def test_names_and_texts_keep_score_then_created_at_then_id_order_and_at_most_three() -> None:
    found = parts(
        {"id": "z", "kind": "personality", "value": "last"},  # no score: after every score
        {"id": "b", "kind": "personality", "score": 1, "payload": {"name": "by-name", "text": " "}},
        {"id": "a", "kind": "personality", "score": 1, "payload": {"text": "inline\x00 "}},
        {"id": "c", "kind": "personality", "score": 0, "value": {"not": "a name"}},  # dropped
        {"id": "d", "kind": "personality", "score": 2, "value": "second"},
        {"id": "e", "kind": "personality", "score": 3, "value": "fourth"},
    )
    assert found == (
        IdentityPart(text="inline", max_chars=CUT),
        IdentityPart(name="by-name", max_chars=CUT),
        IdentityPart(name="second", max_chars=CUT),
    )


async def test_resolution_looks_names_up_skips_failures_and_takes_the_first_model() -> None:
    lookup = Lookup(
        Personality("bratty", 3, "active", "You are Bratty." + "x" * 5000, model="m-bratty"),
        Personality("other", 1, "active", "Other.", model="m-other"),
    )
    identity = await resolve_identity(
        [
            IdentityPart(name="broken"),
            IdentityPart(name="missing"),
            IdentityPart(text="Inline."),
            IdentityPart(name="bratty", max_chars=4000),
            IdentityPart(name="other"),
        ],
        lookup,
        timeout_s=5.0,
    )
    assert identity.text.split("\n\n")[0] == "Inline."
    assert len(identity.text.split("\n\n")[1]) == 4000
    assert identity.text.endswith("\n\nOther.")
    assert identity.model == "m-bratty"
    assert lookup.asked == ["broken", "missing", "bratty", "other"]


async def test_without_a_lookup_names_are_left_out() -> None:
    parts = [IdentityPart(name="bratty"), IdentityPart(text="T")]
    identity = await resolve_identity(parts, None, timeout_s=5.0)
    assert (identity.text, identity.model) == ("T", None)


def test_bitbrat_lurk_file_is_read_even_with_its_hyphenated_name() -> None:
    personality = import_document(json.loads((FIXTURES / "lurk_personality.json").read_text()))
    assert (personality.name, personality.version, personality.status) == (
        "lurk-master",
        1,
        "active",
    )
    assert personality.tags == ("tutorial", "lurk")
    assert personality.created_at is not None
    assert personality.created_at.year == 2026
    assert import_document({"name": "n", "text": "t", "status": "active"}).version == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"text": "t"}, "personality document: missing required name, status"),
        ({"name": "n", "text": 3, "status": "active"}, "personality 'n': text must be a string"),
        ({"name": "n", "text": "t", "status": "x"}, "status must be one of"),
        ({"name": "n", "text": "t", "status": "active", "version": "2"}, "version must be an"),
        ({"name": "n", "text": "t", "status": "active", "tags": "a"}, "tags must be a list"),
        ({"name": "n", "text": "t", "status": "active", "createdAt": "soon"}, "createdAt must"),
        ([], "is a JSON object, got list"),
    ],
)
def test_a_bad_document_says_which_field(document: object, message: str) -> None:
    with pytest.raises(InvalidPersonality, match=message):
        import_document(document)
