"""Strict JSON in and out through the handler: a body with ``NaN``, an infinity or a
number beyond a 64-bit float (which Python's parser takes, and no JSON reader downstream does)
is dead-lettered once as invalid input, its dead letter is strict JSON that still shows the
number, and the event next to it is answered as usual."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import pytest

from llm_bot.events.codec import to_document
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration

PLACEHOLDER = "__NUMBER__"
# Where a number lands: an annotation's extra field is carried through as it came, the event's
# payload and metadata are objects of anything.
BODIES = {
    "NaN in an annotation": ("annotation", "NaN", "NaN is no JSON number"),
    "Infinity in the payload": ("payload", "Infinity", "Infinity is no JSON number"),
    "-Infinity in metadata": ("metadata", "-Infinity", "-Infinity is no JSON number"),
    "1e400 in the payload": ("payload", "1e400", "beyond a 64-bit float: 1e400"),
    "-1E+999 in metadata": ("metadata", "-1E+999", "beyond a 64-bit float: -1E+999"),
    "a 400-digit integer": ("annotation", "9" * 400, "beyond a 64-bit float: 99999"),
    "a 5000-digit integer": ("payload", "1" * 5000, "beyond a 64-bit float: 11111"),
}


def body_with(where: str, number: str, egress_topic: str, case: str) -> bytes:
    """A valid event whose text carries ``number`` verbatim at ``where``."""
    document: dict[str, Any] = to_document(
        prompt_event(case, user="u", thread="t", egress_topic=egress_topic)
    )
    if where == "annotation":
        document["annotations"] = [
            {
                "id": "a1",
                "kind": "score",
                "source": "rules",
                "createdAt": "2026-01-01T00:00:00Z",
                "score": PLACEHOLDER,
            }
        ]
    else:
        document[where] = {"score": PLACEHOLDER}
    return json.dumps(document).replace(f'"{PLACEHOLDER}"', number).encode()


def _refuse(name: str) -> NoReturn:
    raise AssertionError(f"{name} in what the worker published")


def strict(data: bytes) -> Any:
    """The strict reading a JavaScript or Postgres consumer makes: no NaN, no infinities."""
    return json.loads(data, parse_constant=_refuse)


def shown(dead: dict[str, Any]) -> str:
    """What a dead letter shows of the refused body: the event itself where JSON can carry it
    (a 400-digit integer is valid JSON, exactly kept), else a preview of its text."""
    if "original" in dead:
        return json.dumps(dead["original"])
    preview: str = dead["payload"]["originalPayloadPreview"]["preview"]
    return preview


async def test_nan_infinities_and_huge_numbers_are_dead_lettered_once_as_invalid_input(
    bus: MemoryBus,
) -> None:
    deadletters, egress = bus.deadletter_tap(), bus.tap(bus.egress_topic)
    settings = bus.settings()
    good = prompt_event("and me?", user="u2", thread="t", egress_topic=bus.egress_topic)
    async with bus.serving(settings) as worker:
        for case, (where, number, _) in BODIES.items():
            bus.publish(body_with(where, number, bus.egress_topic, case), {"case": case})
        received = await deadletters.take(len(BODIES), timeout_s=60)
        bus.publish_event(good)
        (answer,) = await egress.take(1)
        stats = worker.stats

    assert strict(answer.data)["candidates"][0]["text"] == "echo: and me?"
    by_case = {m.attributes["case"]: m for m in received}
    assert set(by_case) == set(BODIES)
    for case, message in by_case.items():
        where, number, reason = BODIES[case]
        dead = strict(message.data)
        assert reason in message.attributes["deadLetterReason"], case
        assert dead["payload"]["reason"] == message.attributes["deadLetterReason"], case
        assert number[:100] in shown(dead), case
    assert (stats.received, stats.dead_lettered, stats.nacked) == (len(BODIES) + 1, len(BODIES), 0)
    assert await egress.drain() == []  # nothing refused went out
    assert await deadletters.drain() == []  # nor came back to be dead-lettered again
