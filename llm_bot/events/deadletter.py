"""The dead letter as BitBrat writes it: a ``router.deadletter.v1`` event.

Built as BitBrat's ``buildDlqEvent`` (``src/services/routing/dlq.ts``) builds one, so the
platform's persistence records our dead letters with their reason, failed step and slip instead
of as "unknown" (it reads ``payload.reason``, ``payload.lastStepId``, ...). Two additions:

- ``original``: the whole original event, when the message body was a JSON object. Persistence
  stores ``msg.event || msg.original || msg``, so the event it keeps is the one that failed.
- a body that is no JSON object at all (not UTF-8, not JSON, a list, nesting too deep to read)
  has no original event: the correlation id comes from the message attributes or is made up,
  the envelope takes the documented fallbacks, and ``payload.originalPayloadPreview`` holds
  ``{"bytes": <length>, "preview": <first characters, undecodable bytes replaced>}``. So has
  an object with ``NaN`` or an infinity, which JSON cannot carry: it keeps its correlation id.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEADLETTER_TYPE = "router.deadletter.v1"
PREVIEW_MAX_CHARS = 1000  # dlq.ts safePreview: larger payloads become {truncated, length}
RAW_PREVIEW_CHARS = 1000
# Pub/Sub takes 10 MB per message; leave room for the attributes. A dead letter that would be
# larger is sent without the original event (its preview still says what it was).
MAX_BODY_BYTES = 9_000_000
_CORRELATION_ATTRIBUTES = ("correlationId", "correlationid", "correlation_id")


@dataclass(frozen=True)
class Cause:
    """Why, by whom and when a message was given up: what every dead letter says."""

    reason: str
    error: BaseException | str | None
    source: str
    now: str


def deadletter_body(data: bytes, attributes: Mapping[str, str], cause: Cause) -> bytes:
    """The dead letter's body for a message ``data`` that could not be handled."""
    original = _json_object(data)
    if original is not None:
        try:
            event = deadletter_event(original, attributes, cause)
            event["original"] = original
            body = _dumps(event)
        except (RecursionError, ValueError, TypeError):
            body = None
        if body is not None and len(body) <= MAX_BODY_BYTES:
            return body
    event = raw_deadletter_event(data, attributes, cause)
    if original is not None:  # too large or not JSON-safe: keep at least its correlation id
        event["correlationId"] = _correlation_id(original.get("correlationId"), attributes)
    return _dumps(event)


def deadletter_event(
    original: Mapping[str, Any], attributes: Mapping[str, str], cause: Cause
) -> dict[str, Any]:
    """``buildDlqEvent(original, ...)``, field for field, without ``original``."""
    routing = original.get("routing")
    slip = routing.get("slip") if isinstance(routing, Mapping) else None
    payload_value = original.get("payload")
    if not _js_truthy(payload_value):
        message = original.get("message")
        payload_value = message.get("rawPlatformPayload") if isinstance(message, Mapping) else None
    ingress = original.get("ingress")
    event: dict[str, Any] = {
        "v": "2",
        "type": DEADLETTER_TYPE,
        "correlationId": _correlation_id(original.get("correlationId"), attributes),
    }
    if "traceId" in original:
        event["traceId"] = original["traceId"]
    event |= {
        "ingress": ingress if _js_truthy(ingress) else _fallback_ingress(cause),
        "identity": _or(original.get("identity"), _fallback_identity()),
        "egress": _or(original.get("egress"), {"destination": "deadletter"}),
    }
    if routing is not None:
        event["routing"] = routing
    payload: dict[str, Any] = {
        "reason": cause.reason,
        "error": normalize_error(cause.error),
        "lastStepId": infer_last_step_id(slip),
        "originalType": original.get("type"),
        "slipSummary": summarize_slip(slip),
        "originalPayloadPreview": safe_preview(payload_value),
        "egressSource": ingress.get("source") if isinstance(ingress, Mapping) else None,
        "metadata": original.get("metadata"),
    }
    # JSON.stringify leaves out what is undefined; normalizeError's null stays.
    event["payload"] = {k: v for k, v in payload.items() if v is not None or k == "error"}
    return event


def raw_deadletter_event(
    data: bytes, attributes: Mapping[str, str], cause: Cause
) -> dict[str, Any]:
    """The dead letter of a body that is no JSON object: fallbacks and a preview of the bytes."""
    return {
        "v": "2",
        "type": DEADLETTER_TYPE,
        "correlationId": _correlation_id(None, attributes),
        "ingress": _fallback_ingress(cause),
        "identity": _fallback_identity(),
        "egress": {"destination": "deadletter"},
        "payload": {
            "reason": cause.reason,
            "error": normalize_error(cause.error),
            "slipSummary": "[]",
            "originalPayloadPreview": raw_preview(data),
        },
    }


def raw_preview(data: bytes) -> dict[str, Any]:
    return {
        "bytes": len(data),
        "preview": data.decode("utf-8", "replace")[:RAW_PREVIEW_CHARS],
    }


def normalize_error(error: BaseException | str | None) -> dict[str, str] | None:
    """dlq.ts ``normalizeError``: nothing → null; text → code ``error``; an exception → its
    class name."""
    if error is None or error == "":
        return None
    if isinstance(error, str):
        return {"code": "error", "message": error}
    return {"code": type(error).__name__, "message": str(error)}


def infer_last_step_id(slip: Any) -> Any:
    """The id of the first step neither OK nor SKIP, else of the last step."""
    if not isinstance(slip, list) or not slip:
        return None
    steps = [s for s in slip if isinstance(s, Mapping)]
    for step in steps:
        if step.get("status") not in ("OK", "SKIP"):
            return step.get("id")
    return steps[-1].get("id") if steps else None


def summarize_slip(slip: Any) -> str:
    """``[id:STATUS#attempt,...]`` (BitBrat's ``summarizeSlip``); not a list → ``[]``."""
    if not isinstance(slip, list):
        return "[]"
    parts = []
    for step in slip:
        step_ = step if isinstance(step, Mapping) else {}
        attempt = step_.get("attempt")
        suffix = f"#{_js_string(attempt)}" if attempt is not None else ""
        parts.append(f"{_js_string(step_.get('id'))}:{_js_string(step_.get('status'))}{suffix}")
    return "[" + ",".join(parts) + "]"


def safe_preview(value: Any) -> Any:
    """The value itself when its JSON is at most 1000 characters, else ``{truncated, length}``."""
    if not _js_truthy(value):
        return value
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (RecursionError, ValueError, TypeError):
        return {"note": "unserializable"}
    if len(text) <= PREVIEW_MAX_CHARS:
        return value
    return {"truncated": True, "length": len(text)}


def _json_object(data: bytes) -> dict[str, Any] | None:
    """The body read leniently, so a dead letter keeps what it can of an event the codec
    refused; a NaN or an infinity read here cannot be written out (:func:`_dumps`)."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def _dumps(event: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON; text UTF-8 cannot carry (lone surrogates) goes as ``\\u`` escapes.
    NaN and infinities (Python reads them, JSON has none) raise ``ValueError``."""
    text = json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(event, separators=(",", ":"), allow_nan=False).encode()


def _correlation_id(value: Any, attributes: Mapping[str, str]) -> str:
    if isinstance(value, str) and value:
        return value
    for name in _CORRELATION_ATTRIBUTES:
        if attributes.get(name):
            return attributes[name]
    return str(uuid.uuid4())


def _fallback_ingress(cause: Cause) -> dict[str, Any]:
    return {"ingressAt": cause.now, "source": cause.source}


def _fallback_identity() -> dict[str, Any]:
    return {"external": {"id": "unknown", "platform": "system"}}


def _or(value: Any, fallback: Any) -> Any:
    return value if _js_truthy(value) else fallback


def _js_truthy(value: Any) -> bool:
    """JavaScript truthiness: empty objects and lists are true, 0 / "" / null / NaN false."""
    if value is None or value is False or value == "":
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    return True


def _js_string(value: Any) -> str:
    """``String(v)`` for the JSON values a slip step holds."""
    if value is None:
        return "undefined"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value) if isinstance(value, int | float) else "[object Object]"
