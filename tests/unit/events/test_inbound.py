"""The record of a received event: its ids, key, deadline and attempts, worked out once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llm_bot.events.codec import encode
from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.events.inbound import NO_STEP, attempt_limit, deadline_s, inbound_of, key_of, received
from llm_bot.events.limits import InvalidEvent
from llm_bot.events.models import InternalEventV2
from llm_bot.settings import Settings
from llm_bot_tools.local.prompt_events import prompt_event


def event_with_slip(*steps: dict[str, Any]) -> InternalEventV2:
    event = prompt_event("hi", user="u", thread="t", egress_topic="internal.egress.v1")
    document = event.model_dump(by_alias=True, exclude_unset=True)
    document["routing"]["slip"] = list(steps)
    return InternalEventV2.model_validate(document)


def test_the_deadline_is_the_producers_when_set_within_the_upper_bound() -> None:
    event = event_with_slip({"id": "llm-bot", "status": "PENDING"})
    assert deadline_s(event, 120_000, 600_000) == 120.0
    event.qos = {"maxResponseMs": 1500}  # type: ignore[assignment]
    assert deadline_s(event, 120_000, 600_000) == 1.5
    event.qos = {"maxResponseMs": 86_400_000}  # type: ignore[assignment]
    assert deadline_s(event, 120_000, 600_000) == 600.0


def test_the_steps_max_attempts_can_lower_the_delivery_limit() -> None:
    plain = event_with_slip({"id": "llm-bot", "status": "PENDING"})
    strict = event_with_slip({"id": "llm-bot", "status": "PENDING", "maxAttempts": 2})
    assert attempt_limit(plain, 5) == 5
    assert attempt_limit(strict, 5) == 2


def test_the_record_key_names_the_pending_step_by_position() -> None:
    event = event_with_slip(
        {"id": "router", "status": "OK"}, {"id": "llm-bot", "status": "PENDING"}
    )
    assert key_of(event, "u").step == "1:llm-bot"
    assert key_of(event_with_slip(), "u").step == NO_STEP


def test_a_received_message_carries_what_every_stage_reads() -> None:
    event = event_with_slip({"id": "llm-bot", "status": "PENDING", "maxAttempts": 2})
    data, attributes = encode(event)
    inbound = received(data, attributes, Settings(), attempt=3)
    assert (inbound.user_id, inbound.thread_id) == (user_id_of(event), thread_id_of(event))
    assert inbound.key == key_of(event, inbound.user_id)
    assert inbound.key.source == f"{event.correlation_id}:0:llm-bot"
    assert (inbound.attempt, inbound.last_attempt) == (3, 2)
    assert inbound.deadline_s == Settings().event_deadline_ms / 1000
    assert inbound_of(event).deadline_s is None


def test_a_user_id_too_long_to_store_is_refused_on_receipt() -> None:
    event = prompt_event("hi", user="u" * 600, thread="t", egress_topic="internal.egress.v1")
    data, attributes = encode(event)
    with pytest.raises(InvalidEvent, match="user id"):
        received(data, attributes, Settings(), attempt=1)


NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ingress_at", "asked"),
    [
        ("2026-02-28T09:30:00.000Z", datetime(2026, 2, 28, 9, 30, tzinfo=UTC)),  # a backlog
        ("2026-02-28T10:30:00+01:00", datetime(2026, 2, 28, 9, 30, tzinfo=UTC)),
        ("2027-01-01T00:00:00.000Z", NOW),  # a clock ahead: never after now
        ("2026-02-28T09:30:00", None),  # no zone: the time of answering stands in
        ("yesterday", None),
    ],
)
def test_a_question_is_asked_when_it_came_in_never_later_than_now(
    ingress_at: str, asked: datetime | None
) -> None:
    event = prompt_event("hi", user="u", thread="t", egress_topic="internal.egress.v1")
    event.ingress.ingress_at = ingress_at
    assert inbound_of(event, now=NOW).asked_at == asked
