"""The platform's example events through the handler: to the next step of the slip, to
egress when no step is left, skipped without a prompt, and closed as ERROR when the model
refuses the request or the event's deadline passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_bot.events.codec import encode
from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration

CONTRACTS = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"
EXAMPLES = ["chat-message.json", "dm-message.json"]


def contract_event(
    name: str, bus: MemoryBus, slip: list[dict[str, Any]], prompt: str | None, **extra: Any
) -> InternalEventV2:
    """A platform example sent to this test's egress topic with ``slip`` and ``prompt``."""
    document = json.loads((CONTRACTS / name).read_text())
    document["egress"]["destination"] = bus.egress_topic
    document["routing"]["slip"] = slip
    if prompt is not None:
        document["message"]["text"] = prompt  # the user's words; the annotation is the task
        document["annotations"] = [
            {
                "id": "prompt-1",
                "kind": "prompt",
                "source": "event-router",
                "createdAt": "2026-08-14T12:00:00.000Z",
                "value": prompt,
            }
        ]
    document.update(extra)
    return InternalEventV2.model_validate(document)


def llm_bot_step(**extra: Any) -> dict[str, Any]:
    return {"id": "llm-bot", "status": "PENDING", "attempt": 1, **extra}


def test_the_examples_are_present() -> None:
    assert all((CONTRACTS / name).exists() for name in EXAMPLES), CONTRACTS


@pytest.mark.parametrize("example", EXAMPLES)
async def test_an_event_goes_on_to_the_next_step_with_a_candidate(
    bus: MemoryBus, model_server: LocalModelServer, example: str
) -> None:
    slip = [
        llm_bot_step(nextTopic="unused"),
        {"id": "moderation", "status": "PENDING", "nextTopic": bus.next_topic},
    ]
    event = contract_event(example, bus, slip, "What is the capital of Portugal?")
    next_tap = bus.tap(bus.next_topic)
    async with bus.serving(bus.settings()):
        bus.publish_event(event)
        (message,) = await next_tap.take(1)

    out = json.loads(message.data)
    assert message.attributes["correlationId"] == event.correlation_id
    assert message.attributes["type"] == event.type == out["type"]
    first, second = out["routing"]["slip"]
    assert (first["status"], second["status"], second["attempt"]) == ("OK", "PENDING", 0)
    assert "endedAt" in first
    assert "startedAt" in second
    (candidate,) = out["candidates"]
    assert candidate["text"] == "echo: What is the capital of Portugal?"
    assert candidate["status"] == "proposed"
    assert candidate["id"] == f"cand-{event.correlation_id}"
    assert out["identity"] == json.loads((CONTRACTS / example).read_text())["identity"]
    assert len(model_server.chat_requests()) == 1


@pytest.mark.parametrize("example", EXAMPLES)
async def test_with_no_step_left_the_event_goes_to_egress_with_the_candidate_selected(
    bus: MemoryBus, example: str
) -> None:
    event = contract_event(example, bus, [llm_bot_step()], "hello there")
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()):
        bus.publish_event(event)
        (message,) = await egress.take(1)

    out = json.loads(message.data)
    assert out["type"] == message.attributes["type"] == "egress.deliver.v1"
    assert [c["status"] for c in out["candidates"]] == ["selected"]
    assert out["candidates"][0]["text"] == "echo: hello there"
    assert out["routing"]["slip"][0]["status"] == "OK"


async def test_an_event_without_a_prompt_is_skipped_and_forwarded_without_a_model_call(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    event = contract_event("chat-message.json", bus, [llm_bot_step()], prompt=None)
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()):
        bus.publish_event(event)
        (message,) = await egress.take(1)

    out = json.loads(message.data)
    (step,) = out["routing"]["slip"]
    assert (step["status"], step["error"]["code"]) == ("SKIP", "NO_PROMPT")
    assert "candidates" not in out
    assert model_server.chat_requests() == []


async def test_a_request_the_model_rejects_is_forwarded_as_an_error_at_once(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    model_server.fail_next(1, status=400, message="bad request")
    event = contract_event("chat-message.json", bus, [llm_bot_step()], "hello")
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()) as worker:
        bus.publish_event(event)
        (message,) = await egress.take(1)

    out = json.loads(message.data)
    (step,) = out["routing"]["slip"]
    assert (step["status"], step["error"]["code"], step["error"]["retryable"]) == (
        "ERROR",
        "LLM_REQUEST_INVALID",
        False,
    )
    assert out["errors"][0]["source"] == "llm-bot"
    assert worker.stats.nacked == 0


async def test_past_qos_max_response_ms_the_step_is_a_timeout_error(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    model_server.latency_ms = 1500
    event = contract_event(
        "chat-message.json", bus, [llm_bot_step()], "slow one", qos={"maxResponseMs": 300}
    )
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()):
        bus.publish_event(event)
        (message,) = await egress.take(1)

    (step,) = json.loads(message.data)["routing"]["slip"]
    assert (step["status"], step["error"]["code"]) == ("ERROR", "TIMEOUT")
    assert step["error"]["retryable"] is False


async def test_trace_context_rides_along_and_nothing_secret_is_added(bus: MemoryBus) -> None:
    event = contract_event("dm-message.json", bus, [llm_bot_step()], "hi")
    egress = bus.tap(bus.egress_topic)
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with bus.serving(bus.settings()):
        data, attributes = encode(event)
        bus.publish(data, {**attributes, "traceparent": traceparent, "secret": "x"})
        (message,) = await egress.take(1)

    outgoing = dict(message.attributes)
    # Same trace; the span id is the producer span's when a tracer provider is installed
    # (another test module installs the process-wide one), the caller's otherwise.
    assert outgoing.pop("traceparent").split("-")[1] == traceparent.split("-")[1]
    assert outgoing == {
        "type": "egress.deliver.v1",
        "correlationId": event.correlation_id,
        "source": "llm-bot",
    }


async def test_an_event_without_a_trace_id_gets_its_trace_or_none_never_null(
    bus: MemoryBus,
) -> None:
    """A strict reader (the envelope schema's ``traceId`` is a string) refuses a null."""
    event = contract_event("chat-message.json", bus, [llm_bot_step()], "hi")
    assert "traceId" not in json.loads(encode(event)[0])
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()):
        bus.publish_event(event)
        (message,) = await egress.take(1)

    # The event's trace with a tracer provider installed (another test module installs the
    # process-wide one), else no key at all, as it came.
    trace_id = json.loads(message.data).get("traceId", "absent")
    assert isinstance(trace_id, str), trace_id
