"""Chat messages as they reach llm-bot on the platform: the router's rule added its ``prompt``,
BitBrat's query analyzer its ``intent``, ``tone`` and ``risk`` annotations (with ``tokens``,
``entities`` and ``topic`` beside them, as ``src/apps/query-analyzer.ts`` writes them); and
what the tests read back from the published event and the model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.memory_bus import MemoryBus

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"
NOW = "2026-11-22T12:00:00.000Z"
RULE_PROMPT = "Create an appropriate answer to user {{username}}'s latest message."
DANGEROUS = ("self_harm", "privacy", "illegal", "sexual")
META_ONLY = "meta intent only allows internal status tools"
STATUS_TOOLS = {"internal_get_bot_status", "internal_list_available_tools"}
REFUSAL_STARTS = {
    "self_harm": "I can\u2019t help with harming yourself.",
    "privacy": "I can\u2019t help expose or share someone\u2019s private or sensitive information.",
    "illegal": "I can\u2019t help with illegal or dangerous activity.",
    "sexual": "I can\u2019t help with that request.",
}

Document = dict[str, Any]
# BitBrat's task line per response mode (behavior-profile.ts, buildBehavioralTaskInstruction).
TASK_LINES = {
    "light_humor": "Reply with light humor while staying grounded and concise.",
    "gratitude": "Acknowledge the praise appreciatively and keep the conversation moving.",
    "deescalate": "Address the request constructively and without defensiveness.",
    "brief_comply": (
        "Help briefly if the request is safe and in scope; otherwise explain the limit succinctly."
    ),
    "meta_explain": "Explain the relevant bot or system behavior plainly and transparently.",
}


def analysis(
    intent: str = "question",
    valence: float = 0.0,
    arousal: float = 0.0,
    level: str = "none",
    kind: str = "none",
) -> list[Document]:
    """The query analyzer's annotations of one message."""

    def annotation(kind_: str, **fields: Any) -> Document:
        head = {"id": str(uuid4()), "kind": kind_, "source": "query-analyzer", "createdAt": NOW}
        return head | fields

    return [
        annotation("intent", label=intent, value=intent),
        annotation("tone", payload={"valence": valence, "arousal": arousal}),
        annotation("risk", label=level, payload={"level": level, "type": kind}),
        annotation("tokens", payload={"count": 9}),
        annotation("entities", payload={"entities": []}),
        annotation("topic", label="chat", payload={"topic": "chat"}),
    ]


def chat_event(
    bus: MemoryBus,
    annotations: list[Document],
    *,
    text: str | None = None,
    user: str | None = None,
    channel: str | None = None,
) -> Document:
    """The fixture chat message (a shared channel) from its own user in its own channel unless
    told, with the rule's prompt and ``annotations``; llm-bot's step is the slip's only one."""
    event: Document = json.loads((FIXTURES / "chat-message.json").read_text())
    correlation = str(uuid4())
    event["correlationId"] = correlation
    event["identity"]["user"] = {"id": user or f"user{uuid4().hex[:10]}"}
    event["ingress"]["channel"] = event["egress"]["channel"] = channel or f"C{uuid4().hex[:8]}"
    event["egress"]["destination"] = bus.egress_topic
    event["message"] = {
        "id": f"m-{correlation}",
        "role": "user",
        "text": text or f"hi {correlation}",
    }
    prompt = {"id": "a2", "kind": "prompt", "source": "event-router", "createdAt": NOW}
    event["annotations"] = [prompt | {"value": RULE_PROMPT}, *annotations]
    event["routing"] = {
        "stage": "response",
        "slip": [
            {
                "id": "llm-bot",
                "status": "PENDING",
                "attempt": 0,
                "nextTopic": bus.prefix + "-in",
                "attributes": {"origin": "event-router"},
            }
        ],
        "history": [],
    }
    return event


async def answers(bus: MemoryBus, events: list[Document]) -> dict[str, Document]:
    """Publish ``events`` and take one published event per event, by correlation id."""
    egress = bus.tap(bus.egress_topic)
    for event in events:
        bus.publish(json.dumps(event).encode(), {})
    published = [json.loads(m.data) for m in await egress.take(len(events), timeout_s=90)]
    return {document["correlationId"]: document for document in published}


def model_calls(model_server: LocalModelServer, event: Document) -> list[Document]:
    """The chat requests that carried ``event``'s words (each event's words are its own)."""
    words = json.dumps(event["message"]["text"])[1:-1]
    return [r for r in model_server.chat_requests() if words in json.dumps(r["messages"])]


def added(document: Document, kind: str) -> list[Document]:
    """The annotations of ``kind`` llm-bot added to the published event."""
    return [a for a in document["annotations"] if a["kind"] == kind and a["source"] == "llm-bot"]


def profile_of(document: Document) -> Document:
    [profile] = added(document, "behavior-profile")
    return dict(profile["payload"])


def step(document: Document) -> Document:
    [llm_bot] = [s for s in document["routing"]["slip"] if s["id"] == "llm-bot"]
    return llm_bot


def assert_stopped(document: Document, calls: list[Document], gate: str, kind: str) -> None:
    """The gate stopped the event: no model call, BitBrat's annotations, and a refusal (OK)
    or nothing (SKIP, no step error) as the outcome."""
    assert calls == [], "the model was called"
    decision = gate.lower()
    [profile] = added(document, "behavior-profile")
    [strategy] = added(document, "response-strategy")
    [safety] = added(document, "safety-decision")
    assert profile["payload"]["gate"] == gate
    assert strategy["payload"]["toolUse"] == "disabled"
    assert strategy["payload"]["gate"] == gate
    assert (safety["label"], safety["payload"]["reason"]) == (decision, decision)
    if gate != "SAFE_REFUSAL":
        assert (step(document)["status"], "error" in step(document)) == ("SKIP", False)
        assert not document.get("candidates")
        return
    assert step(document)["status"] == "OK"
    [candidate] = document["candidates"]
    assert candidate["id"] == f"cand-{document['correlationId']}-safe-refusal"
    assert (candidate["priority"], candidate["reason"]) == (5, "behavior:safe-refusal")
    # "selected": with no step left, the event goes to egress with its best candidate marked.
    assert (candidate["kind"], candidate["source"], candidate["status"]) == (
        "text",
        "llm-bot",
        "selected",
    )
    assert candidate["text"].startswith(REFUSAL_STARTS[kind])
    assert candidate["metadata"]["behaviorProfile"] == profile["payload"]


def assert_answered(
    document: Document, calls: list[Document], mode: str, suppressed_because: str | None
) -> None:
    """The model answered: tools offered unless ``suppressed_because``, BitBrat's annotations,
    the profile's guidance in the request, and the profile on the candidate."""
    [call] = calls
    request = call["messages"][-1]["content"]
    assert f"- (2) Detected user intent: {profile_of(document)['intent']}." in request
    task = TASK_LINES.get(mode)
    assert task is None or f"## [Task]\n- (2) {task}" in request, request
    assert ("- (2) Do not use tools for this request." in request) == (
        not profile_of(document)["policy"]["shouldUseTools"]
    )
    offered = call.get("tools") or []
    names = {tool["function"]["name"] for tool in offered}
    # A meta question keeps BitBrat's two status tools; any other suppression keeps none.
    kept = STATUS_TOOLS if suppressed_because == META_ONLY else set()
    assert (names == kept) if suppressed_because else (kept < names)
    [profile] = added(document, "behavior-profile")
    [strategy] = added(document, "response-strategy")
    assert added(document, "safety-decision") == []
    assert (profile["label"], strategy["label"]) == (mode, mode)
    use = strategy["payload"]["toolUse"]
    assert (use["enabled"], use["allowedCount"], use["scopeSuppressed"]) == (True, len(offered), [])
    assert {s["reason"] for s in use["suppressed"]} == (
        {suppressed_because} if suppressed_because else set()
    )
    assert step(document)["status"] == "OK"
    [candidate] = document["candidates"]
    assert candidate["text"] == "echo: " + document["message"]["text"]
    assert candidate["metadata"]["behaviorProfile"] == profile["payload"]
