"""What a refused or escalated message leaves behind, and profile annotations of any JSON type,
through the handler.

A refusal and an escalation are decided before the model and before memory: even a message
that carries a memory tool cue leaves no model call, no embedding, no memory, note or history
turn; the ledger alone keeps the published result, so a copy of the event changes nothing;
and the next message of the same user in the same channel is answered without it.
Malformed ``intent``/``tone``/``risk`` annotations fall back as BitBrat's do, are published as
they came, and never dead-letter the event.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from llm_bot_tools.devstack.worker_harness import wait_until
from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.memory_bus import MemoryBus
from .analyzed import (
    Document,
    analysis,
    answers,
    assert_answered,
    assert_stopped,
    chat_event,
    model_calls,
)

pytestmark = pytest.mark.integration

CUE = '[[tool:upsertMemory {"content": "x"}]]'
CRISIS = "I want to end it all tonight"


def rows_of(url: str, user: str) -> dict[str, int]:
    """How many rows of ``user`` each memory table holds."""
    queries = {
        "memories": ("SELECT count(*) FROM memories WHERE user_id = %s", user),
        "conversation_turns": ("SELECT count(*) FROM conversation_turns WHERE user_id = %s", user),
        "agent_notes": ("SELECT count(*) FROM agent_notes WHERE user_id = %s", user),
    }
    with psycopg.connect(url) as db:
        return {
            table: db.execute(query, (value,)).fetchone()[0]  # type: ignore[index]
            for table, (query, value) in queries.items()
        }


async def test_a_refusal_and_an_escalation_make_no_model_call_and_write_no_memory(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    user, room = "vic", "C-lounge"
    stopped = {
        "SAFE_REFUSAL": chat_event(
            bus,
            analysis(level="med", kind="self_harm"),
            text=f"{CUE} {CRISIS}",
            user=user,
            channel=room,
        ),
        "ESCALATE": chat_event(
            bus,
            analysis(level="high", kind="harassment"),
            text=f"{CUE} you are all idiots",
            user=user,
            channel=room,
        ),
        "NO_RESPONSE": chat_event(
            bus, analysis("spam"), text=f"{CUE} buy followers now", user=user, channel=room
        ),
    }
    later = chat_event(bus, analysis(), text="what game is this?", user=user, channel=room)
    url = bus.environment["DATABASE_URL"]
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()) as worker:
        published = await answers(bus, list(stopped.values()))
        assert rows_of(url, user) == {"memories": 0, "conversation_turns": 0, "agent_notes": 0}
        assert model_server.chat_requests() == []
        words = [json.dumps(e["message"]["text"])[1:-1] for e in stopped.values()]
        assert not [r for r in model_server.requests if any(w in json.dumps(r.body) for w in words)]

        # The ledger holds each published result; a copy of the refusal is not answered again.
        refusal = stopped["SAFE_REFUSAL"]
        bus.publish(json.dumps(refusal).encode(), {})
        await wait_until(
            lambda: worker.stats.duplicates + worker.stats.republished == 1, 30, "copy"
        )
        copies = await egress.drain()
        assert [json.loads(m.data) for m in copies] in ([], [published[refusal["correlationId"]]])

        [answered] = (await answers(bus, [later])).values()
    for gate, event in stopped.items():
        kind = "self_harm" if gate == "SAFE_REFUSAL" else "none"
        assert_stopped(published[event["correlationId"]], [], gate, kind)
    with psycopg.connect(url) as db:
        ledger = db.execute(
            "SELECT correlation_id, outcome, output_data FROM processed_events WHERE user_id = %s",
            (user,),
        ).fetchall()
        turns = db.execute(
            "SELECT role, content FROM conversation_turns WHERE user_id = %s ORDER BY seq",
            (user,),
        ).fetchall()
    stored = {c: (outcome, json.loads(bytes(data))) for c, outcome, data in ledger}
    for gate, event in stopped.items():
        outcome = "OK" if gate == "SAFE_REFUSAL" else "SKIP"
        assert stored[event["correlationId"]] == (outcome, published[event["correlationId"]])
    # The next message is answered without the refused one: it was kept nowhere.
    [call] = model_calls(model_server, later)
    assert CRISIS not in json.dumps(call)
    assert "idiots" not in json.dumps(call)
    assert answered["candidates"][0]["text"] == "echo: what game is this?"
    assert [role for role, _ in turns] == ["user", "assistant"]
    assert turns[0][1] == "what game is this?"


def risk(**fields: Any) -> Document:
    return {"id": "r", "kind": "risk", "source": "query-analyzer", **fields}


def tone(**fields: Any) -> Document:
    return {"id": "t", "kind": "tone", "source": "query-analyzer", **fields}


def intent(**fields: Any) -> Document:
    return {"id": "i", "kind": "intent", "source": "query-analyzer", **fields}


NO_TOOLS_AGITATED = "behavior policy disabled tools for this request"
# name -> (annotations, outcome): ("answer", mode, tools held back because) or ("stop", gate, type)
MALFORMED: dict[str, tuple[list[Document], tuple[str, str, str | None]]] = {
    "intent value an object": ([intent(value={"x": 1}, label="spam")], ("answer", "answer", None)),
    "intent label a number": ([intent(label=3)], ("answer", "answer", None)),
    "intent in capitals": ([intent(value=" SPAM ")], ("stop", "NO_RESPONSE", "none")),
    "tone payload a list": ([tone(payload=[0.9, 0.9])], ("answer", "answer", None)),
    "tone payload text": ([tone(payload="furious")], ("answer", "answer", None)),
    "tone scores as text": (
        [intent(value="critique"), tone(payload={"valence": "-0.9", "arousal": "0.95"})],
        ("answer", "deescalate", NO_TOOLS_AGITATED),
    ),
    "tone scores of other types": (
        [intent(value="critique"), tone(payload={"valence": {"a": 1}, "arousal": [True]})],
        ("answer", "deescalate", None),
    ),
    "risk payload text, label high": (
        [risk(label="high", payload="self_harm")],
        ("stop", "ESCALATE", "none"),
    ),
    "risk label a number, payload a list": (
        [risk(label=2, payload=[1])],
        ("answer", "answer", None),
    ),
    "risk spelled out": (
        [risk(payload={"level": "Medium", "type": "Self-Harm"})],
        ("stop", "SAFE_REFUSAL", "self_harm"),
    ),
    "risk level unknown, type dangerous": (
        [risk(payload={"level": "severe", "type": "illegal"})],
        ("stop", "SAFE_REFUSAL", "illegal"),
    ),
    "risk all null": ([risk(label=None, payload=None, value=None)], ("answer", "answer", None)),
    "risk with odd fields around it": (
        [risk(label="low", confidence="high", score=[1], createdAt=5, payload={"level": "low"})],
        ("answer", "answer", None),
    ),
    "two risk annotations, the first counts": (
        [risk(payload={"level": "none"}), risk(payload={"level": "high", "type": "illegal"})],
        ("answer", "answer", None),
    ),
    "no analysis at all": ([], ("answer", "answer", None)),
}


async def test_malformed_profile_annotations_fall_back_and_are_never_dead_lettered(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    events = {name: chat_event(bus, annotations) for name, (annotations, _) in MALFORMED.items()}
    deadletters = bus.deadletter_tap()
    async with bus.serving(bus.settings()):
        published = await answers(bus, list(events.values()))
    assert await deadletters.drain() == []

    for name, event in events.items():
        document = published[event["correlationId"]]
        calls = model_calls(model_server, event)
        kept = document["annotations"][: len(event["annotations"])]
        assert kept == event["annotations"], f"{name}: republished as it came"
        verdict, what, detail = MALFORMED[name][1]
        if verdict == "stop":
            assert_stopped(document, calls, what, detail or "none")
        else:
            assert_answered(document, calls, what, detail)
