"""The pure parts of the transport: settling by the decision, backoff, the dead-letter record,
deadlines, attempt limits and what an output looks like on the bus. The decision's own table is
in test_decision.py."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from llm_bot.answer.unit import Answer
from llm_bot.errors import DeadLetterError
from llm_bot.events.inbound import inbound_of
from llm_bot.events.limits import InvalidEvent
from llm_bot.events.models import InternalEventV2, StepError
from llm_bot.events.routing import RoutingError, advance, check_route, complete_current_step
from llm_bot.settings import Settings
from llm_bot.transport.ack import (
    RETRY_MAX_DELAY_S,
    dead_letter_attributes,
    retry_delay_s,
    settle,
)
from llm_bot.transport.decision import Answered, Attempt, Decision
from llm_bot.transport.handler import output_of
from llm_bot.transport.publisher import PublishFailed
from llm_bot.transport.stats import WorkerStats
from llm_bot_tools.local.prompt_events import prompt_event

LAST = 3


class RecordedDelivery:
    """A delivery that remembers how it was settled."""

    def __init__(self, attempt: int = 1, attributes: Mapping[str, str] | None = None) -> None:
        self.data = b"{}"
        self.attributes = dict(attributes or {"type": "chat.message.v1"})
        self.message_id = "m-1"
        self.delivery_attempt = attempt
        self.settled: list[str] = []

    async def ack(self) -> None:
        self.settled.append("ack")

    async def nack(self) -> None:
        self.settled.append("nack")


def event_with_slip(*steps: dict[str, Any]) -> InternalEventV2:
    event = prompt_event("hi", user="u", thread="t", egress_topic="internal.egress.v1")
    document = event.model_dump(by_alias=True, exclude_unset=True)
    document["routing"]["slip"] = list(steps)
    return InternalEventV2.model_validate(document)


async def test_settle_acks_a_clean_block() -> None:
    delivery, stats = RecordedDelivery(), WorkerStats()
    async with settle(delivery, _unused_dead_letter, stats):
        pass
    assert (delivery.settled, stats.acked) == (["ack"], 1)


@pytest.mark.parametrize(("attempt", "settled"), [(1, ["nack"]), (LAST, ["ack"])])
async def test_a_retryable_step_failure_is_handed_back_until_the_last_attempt(
    attempt: int, settled: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler forwards an answer only when the settlement decides so; a forwarded one is
    acked once the block ends."""
    monkeypatch.setattr("llm_bot.transport.ack.retry_delay_s", lambda _: 0.0)
    delivery = RecordedDelivery(attempt)
    event = event_with_slip({"id": "llm-bot", "status": "PENDING"})
    error = StepError(code="LLM_UNAVAILABLE", message="down", retryable=True)
    async with settle(delivery, _unused_dead_letter, WorkerStats()) as settling:
        decision = settling.report(
            Answered(Answer("ERROR", event, error=error), Attempt(attempt, LAST))
        )
    assert decision is (Decision.NACK if attempt < LAST else Decision.FORWARD)
    assert delivery.settled == settled


async def test_settle_dead_letters_invalid_input_then_acks() -> None:
    delivery, stats = RecordedDelivery(), WorkerStats()
    reasons: list[tuple[str, str]] = []

    async def dead_letter(_: Any, error: DeadLetterError) -> None:
        reasons.append((error.kind, str(error)))

    async with settle(delivery, dead_letter, stats):
        raise InvalidEvent("message body is not JSON")
    assert (delivery.settled, reasons) == (["ack"], [("invalid_event", "message body is not JSON")])
    assert stats.dead_lettered == 1


async def test_a_failed_dead_letter_publish_nacks_instead_of_losing_the_message() -> None:
    delivery = RecordedDelivery(attempt=0)

    async def dead_letter(_: Any, error: DeadLetterError) -> None:
        raise PublishFailed("dead-letter topic unreachable")

    async with settle(delivery, dead_letter, WorkerStats()):
        raise InvalidEvent("bad")
    assert delivery.settled == ["nack"]


async def test_a_retryable_failure_nacks_and_the_worker_carries_on() -> None:
    delivery = RecordedDelivery(attempt=0)
    async with settle(delivery, _unused_dead_letter, WorkerStats()):
        raise RuntimeError("unexpected")
    assert delivery.settled == ["nack"]


async def test_cancellation_hands_the_message_back_and_propagates() -> None:
    delivery = RecordedDelivery()

    async def handle() -> None:
        async with settle(delivery, _unused_dead_letter, WorkerStats()):
            await asyncio.Event().wait()

    task = asyncio.create_task(handle())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert delivery.settled == ["nack"]


def test_the_retry_delay_grows_with_the_attempt_and_is_capped() -> None:
    rng = random.Random(7)
    first = [retry_delay_s(1, rng) for _ in range(50)]
    later = [retry_delay_s(20, rng) for _ in range(50)]
    assert all(0.25 <= d <= 0.5 for d in first)
    assert all(RETRY_MAX_DELAY_S / 2 <= d <= RETRY_MAX_DELAY_S for d in later)


def test_the_dead_letter_record_keeps_the_attributes_and_bounds_the_reason() -> None:
    delivery = RecordedDelivery(attempt=3, attributes={"type": "x", "correlationId": "c"})
    attributes = dead_letter_attributes(delivery, "r" * 5000, "2026-01-01T00:00:00.000Z")
    assert attributes["type"] == "x"
    assert attributes["correlationId"] == "c"
    assert attributes["deadLetterSource"] == "llm-bot"
    assert attributes["originalMessageId"] == "m-1"
    assert attributes["deliveryAttempt"] == "3"
    assert len(attributes["deadLetterReason"]) == 1024


def test_the_dead_letter_record_stays_within_pubsubs_limits() -> None:
    """Multi-byte and unencodable reasons, and a message that used every attribute already."""
    crowded = {f"a{i}": "v" for i in range(100)}
    delivery = RecordedDelivery(attempt=1, attributes=crowded)
    attributes = dead_letter_attributes(delivery, "é\ud800" * 3000, "2026-01-01T00:00:00.000Z")
    assert len(attributes) == 100
    assert attributes["deadLetterSource"] == "llm-bot"
    assert all(len(value.encode()) <= 1024 for value in attributes.values())
    assert attributes["deadLetterReason"].startswith("é?é?")


def test_a_slip_whose_next_pending_step_has_no_topic_is_refused_before_processing() -> None:
    broken = event_with_slip(
        {"id": "llm-bot", "status": "PENDING"}, {"id": "tts", "status": "PENDING"}
    )
    before = broken.model_dump()
    with pytest.raises(RoutingError, match="'tts' is PENDING but has no nextTopic"):
        check_route(broken)
    assert broken.model_dump() == before  # checked, not advanced
    check_route(event_with_slip({"id": "llm-bot", "status": "PENDING"}))


@pytest.mark.parametrize(
    ("topic", "prefix", "named"),
    [
        ("internal.tts.v1", "", True),
        ("a-b_c.d~e+f%20", "", True),
        ("x" * 255, "", True),
        ("x" * 253, "dev", False),  # 253 alone, 256 as published
        ("internal.tts.v1", "1", False),
        ("projects/p/topics/internal.tts.v1", "", False),
        ("a/b", "", False),
        (" internal.tts.v1", "", False),
        ("goog.tts", "", False),
        ("googtts", "a", True),
        ("ab", "", False),
        ("ab", "x", True),
        ("9tts", "", False),
        ("ttsé", "", False),
    ],
)
def test_a_topic_pubsub_cannot_name_is_refused_before_processing(
    topic: str, prefix: str, named: bool
) -> None:
    for event in (
        event_with_slip(
            {"id": "llm-bot", "status": "PENDING"},
            {"id": "tts", "status": "PENDING", "nextTopic": topic},
        ),
        event_with_slip({"id": "llm-bot", "status": "PENDING"}),
    ):
        event.egress.destination = topic
        if named:
            check_route(event, prefix)
        else:
            with pytest.raises(RoutingError, match="is no Pub/Sub topic name"):
                check_route(event, prefix)


@pytest.mark.parametrize(
    ("attributes", "refused"),
    [
        ({"origin": "é" * 512}, False),
        ({"origin": "é" * 512 + "x"}, True),
        ({"k" * 256: "v"}, False),
        ({"k" * 257: "v"}, True),
        ({f"a{i}": "v" for i in range(94)}, False),
        ({f"a{i}": "v" for i in range(95)}, True),
        ({"correlationId": "x" * 2000, "n": None}, False),  # never carried
    ],
)
def test_attributes_pubsub_would_refuse_on_the_next_hop_are_refused_before_processing(
    attributes: dict[str, Any], refused: bool
) -> None:
    event = event_with_slip(
        {"id": "llm-bot", "status": "PENDING"},
        {
            "id": "tts",
            "status": "PENDING",
            "nextTopic": "internal.tts.v1",
            "attributes": attributes,
        },
    )
    if refused:
        with pytest.raises(RoutingError, match="Pub/Sub"):
            check_route(event)
    else:
        check_route(event)


@pytest.mark.parametrize(
    "slip",
    [
        [{"id": "llm-bot", "status": "PENDING"}, {"id": "tts", "status": "PENDING"}],
        [{"id": "llm-bot", "status": "OK"}, {"id": "tts", "status": "PENDING"}],
        [{"id": "llm-bot", "status": "PENDING"}, {"id": "tts", "status": "SKIP"}],
        [
            {"id": "llm-bot", "status": "PENDING"},
            {"id": "tts", "status": "PENDING", "nextTopic": "internal.tts.v1"},
            {"id": "mod", "status": "PENDING"},
        ],
        [],
    ],
)
def test_the_route_check_refuses_exactly_the_slips_that_advancing_would(
    slip: list[dict[str, Any]],
) -> None:
    def advance_after_closing(event: InternalEventV2) -> None:
        complete_current_step(event, "OK", "")
        advance(event, "")

    def refused(check: Callable[[InternalEventV2], None]) -> bool:
        try:
            check(event_with_slip(*slip))
        except RoutingError:
            return True
        return False

    assert refused(check_route) == refused(advance_after_closing)


@pytest.mark.parametrize("ordering", [False, True])
def test_the_output_is_routed_prefixed_and_keyed_by_thread(ordering: bool) -> None:
    settings = Settings(BUS_PREFIX="dev.", LLM_BOT_ORDERING=ordering)  # type: ignore[call-arg]
    event = event_with_slip({"id": "llm-bot", "status": "OK"})
    output = output_of(Answer("SKIP", event), inbound_of(event), settings)
    assert output.topic == "dev.internal.egress.v1"
    assert output.attributes == {
        "type": "egress.deliver.v1",
        "correlationId": event.correlation_id,
        "source": "llm-bot",
    }
    assert json.loads(output.data)["type"] == "egress.deliver.v1"
    assert output.ordering_key == ("cli:t" if ordering else "")


def test_the_next_steps_attributes_ride_along_as_text_never_over_the_protected_ones() -> None:
    """As the platform's base server builds them: ``progressMessage: true`` is ``"true"``."""
    event = event_with_slip(
        {"id": "llm-bot", "status": "PENDING"},
        {
            "id": "egress",
            "status": "PENDING",
            "nextTopic": "internal.egress.v1",
            "attributes": {"origin": "event-router", "progressMessage": True, "source": "x"},
        },
    )
    complete_current_step(event, "OK", "2026-11-22T12:00:00.000Z")
    output = output_of(Answer("OK", event), inbound_of(event), Settings())
    assert output.attributes["origin"] == "event-router"
    assert output.attributes["progressMessage"] == "true"
    assert output.attributes["source"] == "llm-bot"
    assert output.attributes["correlationId"] == event.correlation_id


async def _unused_dead_letter(_: Any, reason: str) -> None:
    raise AssertionError("no dead letter expected")
