"""Malformed messages are dead-lettered with a reason, acked, and the worker carries on."""

from __future__ import annotations

import json
import random
from typing import Any

import psycopg
import pytest

from llm_bot.events.codec import to_document
from llm_bot.events.models import RoutingStep
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration

MAX_BYTES = 16_384


def malformed_messages(egress_topic: str, seed: int = 6) -> dict[str, bytes]:
    """Named bad bodies: random bytes, non-JSON, wrong JSON types, missing fields, oversize
    text, invalid UTF-8, and a slip that cannot be followed."""
    rng = random.Random(seed)
    valid = to_document(prompt_event("hi", user="u", thread="t", egress_topic=egress_topic))

    def variant(change: Any) -> bytes:
        document = json.loads(json.dumps(valid))
        change(document)
        return json.dumps(document).encode()

    bodies = {f"random bytes {i}": rng.randbytes(rng.randint(1, 200)) for i in range(4)}
    bodies |= {
        "empty": b"",
        "not json": b"hello, worker",
        "json array": b"[1, 2, 3]",
        "json string": b'"an event"',
        "invalid utf-8": b'{"v": "2", "correlationId": "\xff\xfe"}',
        "oversize": variant(lambda d: d["message"].update(text="x" * MAX_BYTES)),
    }
    for field in ("correlationId", "identity", "egress", "routing", "ingress"):
        bodies[f"missing {field}"] = variant(lambda d, f=field: d.pop(f))
    wrong_types: dict[str, Any] = {
        "correlationId": 42,
        "annotations": "prompt",
        "routing": [],
        "v": 2,
    }
    for field, value in wrong_types.items():
        bodies[f"wrong type {field}"] = variant(lambda d, f=field, v=value: d.update({f: v}))
    bodies["bad slip status"] = variant(lambda d: d["routing"]["slip"][0].update(status="DONE"))
    bodies["next step without topic"] = variant(
        lambda d: d["routing"]["slip"].append({"id": "tts", "status": "PENDING"})
    )
    return bodies


async def test_every_malformed_message_is_dead_lettered_with_a_reason_and_the_worker_stays_up(
    bus: MemoryBus,
) -> None:
    bodies = malformed_messages(bus.egress_topic)
    deadletters, egress = bus.deadletter_tap(), bus.tap(bus.egress_topic)
    settings = bus.settings(LLM_BOT_MAX_MESSAGE_BYTES=str(MAX_BYTES))
    good = prompt_event("still here?", user="u", thread="t", egress_topic=bus.egress_topic)
    async with bus.serving(settings) as worker:
        for name, body in bodies.items():
            bus.publish(body, {"case": name})
        received = await deadletters.take(len(bodies), timeout_s=60)
        bus.publish_event(good)
        (answer,) = await egress.take(1)
        assert worker.escaped == []  # the handler raised for none of them

    by_case = {m.attributes["case"]: m for m in received}
    assert set(by_case) == set(bodies)
    for name, message in by_case.items():
        dead = json.loads(message.data)
        assert dead["type"] == "router.deadletter.v1", name
        assert dead["payload"]["reason"] == message.attributes["deadLetterReason"], name
        assert _original_in(dead) == _original_of(bodies[name]), name
        assert message.attributes["deadLetterSource"] == "llm-bot"
        assert message.attributes["deadLetterReason"], name
    reasons = {name: m.attributes["deadLetterReason"] for name, m in by_case.items()}
    assert "not UTF-8" in reasons["invalid utf-8"]
    assert "over the limit" in reasons["oversize"]
    assert "not JSON" in reasons["not json"]
    assert "correlationId" in reasons["missing correlationId"]
    assert "no nextTopic" in reasons["next step without topic"]
    assert json.loads(answer.data)["candidates"][0]["text"] == "echo: still here?"
    assert worker.stats.dead_lettered == len(bodies)
    assert await egress.drain() == []


def _original_of(body: bytes) -> Any:
    """What a dead letter carries of ``body``: the document when it is a JSON object, else
    a preview of the bytes."""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if isinstance(document, dict):
        return document
    return {"bytes": len(body), "preview": body.decode("utf-8", "replace")[:1000]}


def _original_in(dead: dict[str, Any]) -> Any:
    return dead.get("original", dead["payload"].get("originalPayloadPreview"))


# Names Pub/Sub refuses as a topic id: a path (another project's topic, or a slash), a space,
# a reserved prefix, too short, no letter first.
UNNAMEABLE_TOPICS = [
    "projects/other-project/topics/internal.egress.v1",
    "a/b",
    "internal egress",
    "goog-topic",
    "ab",
    "1topic",
]


@pytest.mark.parametrize("where", ["next step", "egress"])
async def test_a_hop_to_a_topic_pubsub_cannot_name_is_dead_lettered_before_the_model(
    bus: MemoryBus, model_server: LocalModelServer, where: str
) -> None:
    """Pub/Sub would refuse the publish only after the model answered and the turn was stored,
    so a reply nobody received would stay in the thread's history."""
    deadletters = bus.deadletter_tap()
    events = []
    for topic in UNNAMEABLE_TOPICS:
        event = prompt_event(f"to {topic}", user="u", thread="t", egress_topic=bus.egress_topic)
        if where == "egress":
            event.egress.destination = topic
        else:
            event.routing.slip.append(RoutingStep(id="tts", status="PENDING", next_topic=topic))
        events.append(event)
    async with bus.serving(bus.settings()):
        for event in events:
            bus.publish_event(event)
        received = await deadletters.take(len(events))

    reasons = {
        json.loads(m.data)["correlationId"]: m.attributes["deadLetterReason"] for m in received
    }
    for event, topic in zip(events, UNNAMEABLE_TOPICS, strict=True):
        assert "is no Pub/Sub topic name" in reasons[event.correlation_id], topic
    assert model_server.chat_requests() == []
    with psycopg.connect(bus.environment["DATABASE_URL"]) as db:
        for table in ("channel_turns", "conversation_turns"):
            count = db.execute(f"SELECT count(*) FROM {table} WHERE user_id = 'u'").fetchone()
            assert count == (0,), table


# What the next hop would carry past Pub/Sub's limits: a step attribute's value (1,024 bytes)
# or key (256 bytes), more attributes than a message holds beside ours, a replyTo too long.
OVERSIZE_ATTRIBUTES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "value": ({"origin": "é" * 513}, {}),
    "key": ({"k" * 257: "v"}, {}),
    "count": ({f"a{i}": "v" for i in range(98)}, {}),
    "replyTo": ({}, {"replyTo": "r" * 1025}),
}


@pytest.mark.parametrize("case", OVERSIZE_ATTRIBUTES)
async def test_a_hop_whose_attributes_pubsub_refuses_is_dead_lettered_before_the_model(
    bus: MemoryBus, model_server: LocalModelServer, case: str
) -> None:
    attributes, extra = OVERSIZE_ATTRIBUTES[case]
    event = prompt_event("hello", user="u", thread="t", egress_topic=bus.egress_topic)
    next_step = RoutingStep(
        id="tts", status="PENDING", next_topic=bus.next_topic, attributes=attributes
    )
    event.routing.slip.append(next_step)
    document = {**to_document(event), **extra}
    deadletters = bus.deadletter_tap()
    async with bus.serving(bus.settings()):
        bus.publish(json.dumps(document).encode(), {})
        (dead,) = await deadletters.take(1)

    assert "Pub/Sub" in dead.attributes["deadLetterReason"]
    assert model_server.chat_requests() == []
