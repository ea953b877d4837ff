"""Routing-slip rules and the user/thread id rules of :mod:`llm_bot.events.identity`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_bot.events.codec import from_document
from llm_bot.events.identity import is_direct, thread_id_of, user_id_of
from llm_bot.events.models import CandidateV1, InternalEventV2, StepError
from llm_bot.events.routing import (
    EGRESS_EVENT_TYPE,
    RoutingError,
    advance,
    complete_current_step,
    current_step,
    select_best_candidate,
)

CONTRACTS = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"
NOW = "2026-11-21T12:00:00.000Z"


def load(name: str, **changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((CONTRACTS / name).read_text())
    document.update(changes)
    return document


def event_with_slip(*steps: dict[str, Any]) -> InternalEventV2:
    document = load("chat-message.json")
    document["routing"]["slip"] = list(steps)
    return from_document(document)


def candidate(cid: str, priority: int, confidence: float | None = None) -> CandidateV1:
    return CandidateV1(
        id=cid,
        kind="text",
        source="t",
        created_at=NOW,
        status="proposed",
        priority=priority,
        confidence=confidence,
    )


def test_current_step_is_the_first_pending_one() -> None:
    event = event_with_slip(
        {"id": "router", "status": "OK"},
        {"id": "llm-bot", "status": "PENDING"},
        {"id": "formatter", "status": "PENDING", "nextTopic": "internal.formatter.v1"},
    )
    step = current_step(event)
    assert step is not None
    assert step.id == "llm-bot"


def test_completing_then_advancing_goes_to_the_next_pending_topic_with_prefix() -> None:
    event = event_with_slip(
        {"id": "llm-bot", "status": "PENDING", "attempt": 0},
        {
            "id": "formatter",
            "status": "PENDING",
            "nextTopic": "internal.formatter.v1",
            "attempt": 0,
        },
    )
    complete_current_step(event, "OK", NOW)
    hop = advance(event, NOW, with_prefix="dev.")
    assert (hop.topic, hop.is_egress) == ("dev.internal.formatter.v1", False)
    done, following = event.routing.slip
    assert (done.status, done.ended_at, done.error) == ("OK", NOW, None)
    assert (following.status, following.attempt, following.started_at) == ("PENDING", 1, NOW)
    assert event.type == "chat.message.v1"


def test_prefix_is_not_doubled() -> None:
    event = event_with_slip({"id": "f", "status": "PENDING", "nextTopic": "dev.internal.f.v1"})
    assert advance(event, NOW, with_prefix="dev.").topic == "dev.internal.f.v1"


def test_an_error_is_recorded_on_the_step() -> None:
    event = event_with_slip({"id": "llm-bot", "status": "PENDING"})
    error = StepError(code="LLM_UNAVAILABLE", message="model unreachable", retryable=True)
    step = complete_current_step(event, "ERROR", NOW, error)
    assert step is not None
    assert step.error == error
    assert event.routing.slip[0].status == "ERROR"


def test_no_pending_step_left_goes_to_egress_with_the_best_candidate_selected() -> None:
    event = event_with_slip({"id": "llm-bot", "status": "PENDING"})
    event.candidates = [candidate("a", 10, 0.2), candidate("b", 5, 0.1), candidate("c", 5, 0.9)]
    complete_current_step(event, "OK", NOW)
    hop = advance(event, NOW)
    assert (hop.topic, hop.is_egress) == ("internal.egress.v1.test", True)
    assert event.type == EGRESS_EVENT_TYPE
    assert [c.status for c in event.candidates] == ["proposed", "proposed", "selected"]


def test_best_candidate_of_none_is_none_and_ties_keep_the_first() -> None:
    assert select_best_candidate([]) is None
    first, second = candidate("x", 1), candidate("y", 1)
    assert select_best_candidate([first, second]) is first


def test_the_best_candidate_is_the_platforms_choice_whatever_a_rule_left_out() -> None:
    """BitBrat's selectBestCandidate: no priority is last, no confidence is -1 (below 0), then
    the earliest createdAt, one missing or unreadable last."""
    unranked = CandidateV1(id="rule", kind="text")
    ours = candidate("ours", 10)
    assert select_best_candidate([unranked, ours]) is ours
    sure, unsure = candidate("sure", 10, confidence=0.0), candidate("unsure", 10)
    assert select_best_candidate([unsure, sure]) is sure
    late, early = candidate("late", 10), candidate("early", 10)
    late.created_at, early.created_at = "2026-01-01T00:00:01.500Z", "2026-01-01T00:00:01Z"
    assert select_best_candidate([late, early]) is early
    garbled = candidate("garbled", 10)
    garbled.created_at = "yesterday"
    assert select_best_candidate([garbled, late]) is late


def test_a_pending_step_without_a_topic_is_a_routing_error() -> None:
    event = event_with_slip(
        {"id": "llm-bot", "status": "PENDING"}, {"id": "next", "status": "PENDING"}
    )
    complete_current_step(event, "OK", NOW)
    with pytest.raises(RoutingError, match="'next' is PENDING but has no nextTopic"):
        advance(event, NOW)


def test_user_id_prefers_the_platform_user_then_the_external_identity() -> None:
    event = from_document(load("dm-message.json"))
    assert user_id_of(event) == "discord:111222333444555666"
    document = load("dm-message.json")
    document["identity"]["user"] = {"id": "u-42"}
    assert user_id_of(from_document(document)) == "u-42"


@pytest.mark.parametrize(
    ("name", "egress_changes", "ingress_changes", "expected"),
    [
        ("chat-message.json", {}, {}, "slack:C123456789"),
        ("dm-message.json", {}, {}, "discord:9876543210987654321:discord:111222333444555666"),
        ("chat-message.json", {"channel": None}, {"channel": "C-in"}, "slack:C-in"),
        ("chat-message.json", {"channel": None}, {"channel": None}, "slack::slack:U987654321"),
        ("chat-message.json", {"channel": "a:b%c"}, {}, "slack:a%3Ab%25c"),
        ("chat-message.json", {"connector": "x:y"}, {}, "x%3Ay:C123456789"),
    ],
)
def test_thread_id_rule(
    name: str, egress_changes: dict[str, Any], ingress_changes: dict[str, Any], expected: str
) -> None:
    document = load(name)
    document["egress"].update(egress_changes)
    document["ingress"].update(ingress_changes)
    assert thread_id_of(from_document(document)) == expected


def test_a_public_channel_never_shares_an_id_with_a_dm() -> None:
    """Channel ``a:b`` in public, and user ``b`` writing directly in channel ``a``."""
    public = load("chat-message.json")
    public["egress"].update({"channel": "a:b", "type": "chat"})
    direct = load("chat-message.json")
    direct["egress"].update({"channel": "a", "type": "dm"})
    direct["identity"]["user"] = {"id": "b"}
    assert thread_id_of(from_document(public)) != thread_id_of(from_document(direct))


def test_a_next_step_without_an_attempt_starts_at_0_as_on_the_platform() -> None:
    document = load("chat-message.json")
    document["routing"]["slip"] = [
        {"id": "llm-bot", "status": "PENDING", "attempt": 1},
        {"id": "tts", "status": "PENDING", "nextTopic": "internal.tts.v1"},
    ]
    event = from_document(document)
    complete_current_step(event, "OK", NOW)
    advance(event, NOW)
    assert event.routing.slip[1].attempt == 0


@pytest.mark.parametrize(
    ("changes", "direct"),
    [
        ({}, False),
        ({"egress": {"type": "dm"}}, True),
        # A routing rule replaced the DM's egress: the event type still says DM.
        ({"type": "dm.message.v1", "egress": {"type": "discord", "channel": None}}, True),
        ({"type": "dm.message.v1"}, True),
        ({"egress": {"type": None}}, True),
        ({"egress": {"type": "discord"}}, True),
        ({"egress": {"type": "event"}}, True),
        ({"egress": {"type": " Chat "}}, False),
        ({"egress": {"channel": None}, "ingress": {"channel": None}}, True),
        ({"channelType": 1}, True),
        ({"channelType": 0}, False),
        ({"isDM": 1}, True),
        ({"isDM": True}, True),
        ({"isDM": False}, False),
        ({"egress": {"channel": "D0123"}}, True),
        ({"ingress": {"connector": "twilio"}, "egress": {"connector": "twilio"}}, True),
    ],
)
def test_an_event_is_shared_only_when_nothing_says_it_is_private(
    changes: dict[str, Any], direct: bool
) -> None:
    document = load("chat-message.json")
    for field, value in changes.items():
        if isinstance(value, dict):
            document[field].update(value)
        else:
            document[field] = value
    event = from_document(document)
    assert is_direct(event) is direct
    assert thread_id_of(event).endswith(":" + user_id_of(event)) is direct
