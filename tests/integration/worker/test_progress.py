"""BitBrat's "🤔 Thinking about your request..." through a running worker: sent while the model
is still working and before the reply, once per event, never for a fast answer, a progress
event or a second run of a redelivered event (llm_bot/transport/progress.py).

The events' egress destination is BitBrat's ``internal.egress.v1``, where the progress message
goes too, so both arrive on one tap (under this test's ``BUS_PREFIX``) and their order there
is the order in which the worker published them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from google.pubsub_v1.types import PubsubMessage

from llm_bot.events.builder import prompt_event
from llm_bot.events.codec import to_document
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.transport.progress import progress_subject
from llm_bot_tools.devstack.send import SendRequest, send_and_wait
from llm_bot_tools.devstack.worker_harness import Bus, Tap, running_worker, wait_until
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator

from .conftest import BusFactory

pytestmark = pytest.mark.integration

AFTER_MS = 200
SLOW_S = 2.0  # ten times AFTER_MS: the timer fires well inside every slow model call
THINKING = "🤔 Thinking about your request..."
SOURCE = "feedback-middleware"  # the annotation's source, as BitBrat writes it


@pytest.fixture
def progress_bus(make_bus: BusFactory, fresh_database_url: str, unique_name: str) -> Bus:
    settings = {
        "BUS_PREFIX": f"{unique_name}-",  # the bus's own topics already start with it
        "LLM_BOT_PROGRESS_AFTER_MS": str(AFTER_MS),
        "LLM_BOT_SHUTDOWN_GRACE_S": "1",
    }
    bus = make_bus(fresh_database_url, settings, max_delivery_attempts=100)
    # Over the harness's short model timeouts: a slow answer is slow, not a timeout and a retry.
    bus.environment |= {"OPENAI_TIMEOUT_MS": "30000", "LLM_BOT_MODEL_DEADLINE_MS": "30000"}
    return bus


@pytest.fixture
def egress(progress_bus: Bus, pubsub_emulator: PubSubEmulator) -> Tap:
    """The tap of ``<BUS_PREFIX>internal.egress.v1``."""
    topic = f"{progress_bus.prefix}-{DEFAULT_EGRESS_TOPIC}"
    topology = pubsub_emulator.create_topology(  # the bus's topics exist and are kept
        input_topic=f"{progress_bus.prefix}-in",
        subscription=f"{progress_bus.prefix}-sub",
        deadletter_topic=f"{progress_bus.prefix}-dlq",
        output_topics=[topic],
    )
    return Tap(progress_bus.clients.subscriber, topology.output_subscriptions[topic])


def asked(text: str) -> InternalEventV2:
    return prompt_event(text, user="u-1", thread="lobby", egress_topic=DEFAULT_EGRESS_TOPIC)


def document_of(message: PubsubMessage) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(message.data)
    return document


def annotation(document: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [a for a in document.get("annotations") or [] if a["kind"] == kind]
    return found


def progress_for(message: PubsubMessage) -> str | None:
    """The correlation id a progress message speaks for; None for any other message."""
    return progress_subject(document_of(message))


def assert_bitbrat_progress(message: PubsubMessage, event: InternalEventV2) -> None:
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


def assert_reply_to(message: PubsubMessage, event: InternalEventV2) -> None:
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
    progress_bus: Bus, egress: Tap, model_server: LocalModelServer
) -> None:
    fast, slow = asked("quick one"), asked("take your time")
    async with running_worker(progress_bus.settings()) as worker:
        progress_bus.publish_event(fast)
        (fast_reply,) = await egress.take(1)
        # The slow event is answered after more than ten times the progress delay: a timer
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
    progress_bus: Bus, egress: Tap, model_server: LocalModelServer
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
    async with running_worker(progress_bus.settings()) as worker:
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
    progress_bus: Bus, egress: Tap, model_server: LocalModelServer
) -> None:
    """The first worker stops while its model call hangs: the event goes back to Pub/Sub and
    a second worker answers it, as slowly, without telling the channel again."""
    event = asked("are you there?")
    model_server.hang_next(1, 60.0)
    async with running_worker(progress_bus.settings()) as first:
        progress_bus.publish_event(event)
        (thinking,) = await egress.take(1)
    assert first.stats.nacked == 1
    model_server.latency_ms = SLOW_S * 1000
    async with running_worker(progress_bus.settings()) as second:
        (reply,) = await egress.take(1)
        await wait_until(lambda: second.stats.acked == 1, 30, "the reply acked")
        assert await egress.drain() == []

    assert_bitbrat_progress(thinking, event)
    assert_reply_to(reply, event)
    assert len(model_server.chat_requests()) == 2  # the second run called the slow model too
    assert (first.stats.progress_sent, second.stats.progress_sent) == (1, 0)


async def test_a_failed_progress_publish_leaves_the_event_answered_once(
    progress_bus: Bus, model_server: LocalModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``<BUS_PREFIX>internal.egress.v1`` does not exist here: Pub/Sub refuses the progress
    message, and the event is answered as if it had never been tried."""
    event = prompt_event(
        "hello?", user="u-1", thread="lobby", egress_topic=progress_bus.egress_topic
    )
    egress = progress_bus.tap(progress_bus.egress_topic)
    model_server.hang_next(1, SLOW_S)
    async with running_worker(progress_bus.settings()) as worker:
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


async def test_llm_bot_send_shows_the_progress_message_and_takes_it_off_the_tap(
    progress_bus: Bus,
    egress: Tap,
    model_server: LocalModelServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`llm-bot send` waits on the egress tap, where the progress message for its event comes
    first: it is shown and acked, not handed back to the tap again and again."""
    # send's clients find the emulator as the command's do, in the environment
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", progress_bus.environment["PUBSUB_EMULATOR_HOST"])
    event = asked("take your time")
    model_server.hang_next(1, SLOW_S)
    settings = progress_bus.settings()
    reply_subscription = egress.subscription_path.rsplit("/", 1)[-1]
    async with running_worker(settings):
        request = SendRequest(event, reply_subscription, timeout_s=60)
        answer = await asyncio.to_thread(send_and_wait, settings, request)
    assert answer["correlationId"] == event.correlation_id
    assert capsys.readouterr().err.count(THINKING) == 1
    assert await egress.drain() == []
