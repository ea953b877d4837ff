"""The dead letter as a BitBrat ``router.deadletter.v1`` event (contract §8.1)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from llm_bot.events.deadletter import (
    DEADLETTER_TYPE,
    MAX_BODY_BYTES,
    Cause,
    deadletter_body,
    infer_last_step_id,
    normalize_error,
    safe_preview,
    summarize_slip,
)

CONTRACTS = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"
NOW = "2026-11-21T12:00:00.000Z"


def body_of(data: bytes, attributes: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"reason": "bad slip", "error": "bad slip", "source": "llm-bot"}
    cause = Cause(**(args | kw), now=NOW)
    result: dict[str, Any] = json.loads(deadletter_body(data, attributes or {}, cause))
    return result


def chat_message() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((CONTRACTS / "chat-message.json").read_text())
    return document


def test_a_json_event_becomes_a_deadletter_event_carrying_the_original() -> None:
    original = chat_message()
    original["routing"]["slip"] = [
        {"id": "router", "status": "OK", "attempt": 1},
        {"id": "llm-bot", "status": "PENDING", "attempt": 2},
        {"id": "egress", "status": "PENDING"},
    ]
    original["metadata"] = {"k": "v"}
    dead = body_of(json.dumps(original).encode())

    assert dead["v"] == "2"
    assert dead["type"] == DEADLETTER_TYPE
    assert dead["correlationId"] == original["correlationId"]
    for field in ("ingress", "identity", "egress", "routing"):
        assert dead[field] == original[field], field
    assert dead["original"] == original
    payload = dead["payload"]
    assert payload["reason"] == "bad slip"
    assert payload["error"] == {"code": "error", "message": "bad slip"}
    assert payload["lastStepId"] == "llm-bot"
    assert payload["originalType"] == original["type"]
    assert payload["slipSummary"] == "[router:OK#1,llm-bot:PENDING#2,egress:PENDING]"
    assert payload["metadata"] == {"k": "v"}
    assert payload["egressSource"] == original["ingress"].get("source")


def test_missing_envelope_parts_take_the_documented_fallbacks() -> None:
    original = {"correlationId": "c-1", "type": "chat.message.v1", "payload": {"a": 1}}
    dead = body_of(json.dumps(original).encode())
    assert dead["ingress"] == {"ingressAt": NOW, "source": "llm-bot"}
    assert dead["identity"] == {"external": {"id": "unknown", "platform": "system"}}
    assert dead["egress"] == {"destination": "deadletter"}
    assert "routing" not in dead
    assert dead["payload"]["slipSummary"] == "[]"
    assert "lastStepId" not in dead["payload"]
    assert dead["payload"]["originalPayloadPreview"] == {"a": 1}
    assert dead["original"] == original


def test_a_json_object_without_a_correlation_id_takes_the_attributes_one() -> None:
    dead = body_of(b'{"v": "2"}', {"correlationId": "from-attr"})
    assert dead["correlationId"] == "from-attr"
    assert dead["original"] == {"v": "2"}


@pytest.mark.parametrize(
    "data", [b"", b"hello", b"[1, 2, 3]", b'"x"', b"\xff\xfe{}", b"[" * 5000 + b"]" * 5000]
)
def test_bytes_that_are_no_json_object_get_a_preview_and_a_fresh_correlation_id(
    data: bytes,
) -> None:
    dead = body_of(data)
    assert "original" not in dead
    uuid.UUID(dead["correlationId"])
    assert dead["identity"] == {"external": {"id": "unknown", "platform": "system"}}
    assert dead["egress"] == {"destination": "deadletter"}
    assert dead["payload"]["originalPayloadPreview"] == {
        "bytes": len(data),
        "preview": data.decode("utf-8", "replace")[:1000],
    }
    assert dead["payload"]["reason"] == "bad slip"


def test_raw_bytes_keep_a_correlation_id_given_in_the_attributes() -> None:
    assert body_of(b"\x00\x01", {"correlationId": "c-9"})["correlationId"] == "c-9"


def test_text_utf8_cannot_carry_is_escaped_not_lost() -> None:
    data = json.dumps({"correlationId": "c", "message": {"text": "a\ud800"}}).encode()
    body = deadletter_body(data, {}, Cause("r", "r", "llm-bot", NOW))
    assert json.loads(body)["original"]["message"]["text"] == "a\ud800"


def test_a_dead_letter_over_the_pubsub_limit_drops_the_original() -> None:
    data = json.dumps({"correlationId": "big", "payload": {"x": "y" * MAX_BODY_BYTES}}).encode()
    dead = body_of(data)
    assert "original" not in dead
    assert dead["correlationId"] == "big"
    assert dead["payload"]["originalPayloadPreview"]["bytes"] == len(data)


def test_slip_rules_follow_bitbrat() -> None:
    assert infer_last_step_id([{"id": "a", "status": "OK"}, {"id": "b", "status": "SKIP"}]) == "b"
    assert infer_last_step_id([{"id": "a", "status": "ERROR"}, {"id": "b"}]) == "a"
    assert infer_last_step_id([]) is None
    assert summarize_slip("nope") == "[]"
    assert summarize_slip([{"id": "a", "status": "OK", "attempt": 0}]) == "[a:OK#0]"


def test_preview_and_error_follow_bitbrat() -> None:
    assert safe_preview({"a": 1}) == {"a": 1}
    assert safe_preview({"a": "x" * 2000}) == {"truncated": True, "length": 2008}
    assert safe_preview(None) is None
    assert normalize_error(None) is None
    assert normalize_error(ValueError("no")) == {"code": "ValueError", "message": "no"}


def test_an_object_json_cannot_carry_is_sent_as_raw_bytes() -> None:
    data = b'{"correlationId": "c-nan", "payload": {"x": NaN}}'
    dead = body_of(data)
    assert "original" not in dead
    assert dead["correlationId"] == "c-nan"
    assert dead["payload"]["originalPayloadPreview"]["preview"] == data.decode()
