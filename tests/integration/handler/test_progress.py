"""BitBrat's "🤔 Thinking about your request..." from the event handler: sent while the model
is still working and before the reply, once per event, never for a fast answer, a progress
event or a second run of a redelivered event (llm_bot/transport/progress.py).

The events' egress destination is BitBrat's ``internal.egress.v1``, where the progress message
goes too, so both arrive on one tap (under this test's ``BUS_PREFIX``) and their order there
is the order in which the handler published them. ``llm-bot send`` showing it is tested with
the emulator (``tests/integration/worker/test_send_progress.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_bot.events.codec import to_document
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.transport.progress import progress_subject
from llm_bot_tools.devstack.worker_harness import wait_until
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus, MemoryTap, Published
from .conftest import BusFactory

pytestmark = pytest.mark.integration

AFTER_MS = 800  # a fast answer ends well inside it on a loaded machine
SLOW_S = 4.0  # five times AFTER_MS: the timer fires well inside every slow model call
THINKING = "🤔 Thinking about your request..."
SOURCE = "feedback-middleware"  # the annotation's source, as BitBrat writes it


@pytest.fixture
def progress_bus(make_bus: BusFactory, migrated_database_url: str, unique_name: str) -> MemoryBus:
    settings = {
        "BUS_PREFIX": f"{unique_name}-",  # the bus's own topics already start with it
        "LLM_BOT_PROGRESS_AFTER_MS": str(AFTER_MS),
        "LLM_BOT_SHUTDOWN_GRACE_S": "1",
    }
    bus = make_bus(migrated_database_url, settings)
    # Over the harness's short model timeouts: a slow answer is slow, not a timeout and a retry.
    bus.environment |= {"OPENAI_TIMEOUT_MS": "30000", "LLM_BOT_MODEL_DEADLINE_MS": "30000"}
    return bus


@pytest.fixture
def egress(progress_bus: MemoryBus) -> MemoryTap:
    """The tap of ``<BUS_PREFIX>internal.egress.v1``."""
    topic = f"{progress_bus.prefix}-{DEFAULT_EGRESS_TOPIC}"
    progress_bus.publisher.create_topic(topic)
    return progress_bus.tap(topic)


def asked(text: str) -> InternalEventV2:
    return prompt_event(text, user="u-1", thread="lobby", egress_topic=DEFAULT_EGRESS_TOPIC)


def document_of(message: Published) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(message.data)
    return document


def annotation(document: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [a for a in document.get("annotations") or [] if a["kind"] == kind]
    return found


def progress_for(message: Published) -> str | None:
    """The correlation id a progress message speaks for; None for any other message."""
    return progress_subject(document_of(message))


def assert_bitbrat_progress(message: Published, event: InternalEventV2) -> None:
    """The event BitBrat's feedback middleware publishes (``sendTemplateMessage``)."""
    document, original = document_of(message), to_document(event)
    attributes = {k: v for k, v in message.attributes.items() if k != "traceparent"}
    assert attributes == {
        "type": "internal.egress.v1",
        "correlationId": document["correlationId"],
        "source": "llm-bot",
    }
    assert document["correlationId"] != event.correlation_id
    (feedback,) = document.pop("annotations")
    value = json.loads(feedback.pop("value"))
    assert value.pop("elapsedMs") >= AFTER_MS
    assert value == {"originalCorrelationId": event.correlation_id, "stage": "initial"}
    assert (feedback.pop("kind"), feedback.pop("source")) == ("progress_feedback", SOURCE)
    assert set(feedback) == {"id", "createdAt"}
    message_part = document.pop("message")
    assert (message_part.pop("role"), message_part.pop("text")) == ("assistant", THINKING)
    assert set(message_part) == {"id"}
    del document["correlationId"]
    assert document == {
        "v": "2",
        "type": "internal.egress.v1",
        "ingress": original["ingress"],
        "identity": original["identity"],
        "egress": original["egress"],
        "payload": {"type": "internal.egress.v1"},
        "routing": {"stage": "response", "slip": [], "history": []},
    }


def assert_reply_to(message: Published, event: InternalEventV2) -> None:
    """The answer itself, carrying BitBrat's ``operation_context``."""
    document = document_of(message)
    assert (document["type"], document["correlationId"]) == (
        "egress.deliver.v1",
        event.correlation_id,
    )
    context = annotation(document, "operation_context")
    assert context["source"] == "llm-bot"
    value = json.loads(context["value"])
    assert isinstance(value.pop("startedAt"), int)
    assert value == {
        "operation": "llm_request",
        "originalMessage": event.message.text if event.message else "",
        "eventType": event.type,
    }


async def test_a_slow_answer_is_preceded_by_one_progress_message_a_fast_one_by_none(
    progress_bus: MemoryBus, egress: MemoryTap, model_server: LocalModelServer
) -> None:
    fast, slow = asked("quick one"), asked("take your time")
    async with progress_bus.serving(progress_bus.settings()) as worker:
        progress_bus.publish_event(fast)
        (fast_reply,) = await egress.take(1)
        # The slow event is answered after more than five times the progress delay: a timer
        # the fast event left running would have published before its reply.
        model_server.hang_next(1, SLOW_S)
        progress_bus.publish_event(slow)
        thinking, slow_reply = await egress.take(2)
        await wait_until(lambda: worker.stats.acked == 2, 30, "both events acked")
        assert await egress.drain() == []

    assert_reply_to(fast_reply, fast)
    assert_bitbrat_progress(thinking, slow)
    assert_reply_to(slow_reply, slow)
    assert thinking.publish_time < slow_reply.publish_time
    assert worker.stats.progress_sent == 1


async def test_a_progress_event_gets_no_progress_message_of_its_own(
    progress_bus: MemoryBus, egress: MemoryTap, model_server: LocalModelServer
) -> None:
    """A ``chat.progress.v1`` event (BitBrat's ``createProgressEvent``) asks the model for a
    progress text; it is as slow as the chat message beside it, yet only that one is told."""
    chat = asked("a long question")
    progress = asked("Generate a brief, encouraging progress message")
    progress.type = "chat.progress.v1"
    context = {"originalCorrelationId": chat.correlation_id, "stage": "initial"}
    progress.annotations = [
        *(progress.annotations or []),
        AnnotationV1(id="pc-1", kind="progress_context", value=json.dumps(context)),
    ]
    model_server.hang_next(2, SLOW_S)
    async with progress_bus.serving(progress_bus.settings()) as worker:
        progress_bus.publish_event(progress)
        progress_bus.publish_event(chat)
        received = await egress.take(3)
        await wait_until(lambda: worker.stats.acked == 2, 30, "both events acked")
        received += await egress.drain()

    told = [progress_for(m) for m in received]
    assert sorted(told, key=str) == sorted([chat.correlation_id, None, None], key=str)
    replies = {document_of(m)["correlationId"]: m for m in received if progress_for(m) is None}
    assert_reply_to(replies[chat.correlation_id], chat)
    progress_reply = document_of(replies[progress.correlation_id])
    assert progress_reply["type"] == "egress.deliver.v1"
    assert "operation_context" not in [a["kind"] for a in progress_reply["annotations"]]


async def test_a_redelivered_event_answered_again_sends_no_second_progress_message(
    progress_bus: MemoryBus, egress: MemoryTap, model_server: LocalModelServer
) -> None:
    """The first worker stops while its model call hangs: the event goes back to Pub/Sub and
    a second worker answers it, as slowly, without telling the channel again."""
    event = asked("are you there?")
    model_server.hang_next(1, 60.0)
    async with progress_bus.serving(progress_bus.settings()) as first:
        progress_bus.publish_event(event)
        (thinking,) = await egress.take(1)
    assert first.stats.nacked == 1
    model_server.latency_ms = SLOW_S * 1000
    async with progress_bus.serving(progress_bus.settings()) as second:
        (reply,) = await egress.take(1)
        await wait_until(lambda: second.stats.acked == 1, 30, "the reply acked")
        assert await egress.drain() == []

    assert_bitbrat_progress(thinking, event)
    assert_reply_to(reply, event)
    assert len(model_server.chat_requests()) == 2  # the second run called the slow model too
    assert (first.stats.progress_sent, second.stats.progress_sent) == (1, 0)


async def test_a_failed_progress_publish_leaves_the_event_answered_once(
    progress_bus: MemoryBus, model_server: LocalModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``<BUS_PREFIX>internal.egress.v1`` does not exist here: Pub/Sub refuses the progress
    message, and the event is answered as if it had never been tried."""
    event = prompt_event(
        "hello?", user="u-1", thread="lobby", egress_topic=progress_bus.egress_topic
    )
    egress = progress_bus.tap(progress_bus.egress_topic)
    model_server.hang_next(1, SLOW_S)
    async with progress_bus.serving(progress_bus.settings()) as worker:
        progress_bus.publish_event(event)
        (reply,) = await egress.take(1)
        await wait_until(lambda: worker.stats.acked == 1, 30, "the event acked")
        assert await egress.drain() == []

    document = document_of(reply)
    assert (document["correlationId"], document["routing"]["slip"][0]["status"]) == (
        event.correlation_id,
        "OK",
    )
    refused = [r for r in caplog.records if r.getMessage().startswith("progress message not sent")]
    assert len(refused) == 1
    assert (worker.stats.nacked, worker.stats.progress_sent) == (0, 0)
