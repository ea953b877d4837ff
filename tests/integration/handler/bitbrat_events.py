"""Events shaped as BitBrat's event-router emits them from its own rules (the fixtures under
``tests/fixtures/bitbrat/rules``), for tests that drive the handler."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from ...support.memory_bus import MemoryBus

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"
NOW = "2026-11-22T12:00:00.000Z"


def routed(
    rule_name: str, bus: MemoryBus, follow_up: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The fixture chat message after the router applied ``rule_name``: the rule's annotations
    (``createdAt`` and ``source`` as the router sets them), its slip normalised (PENDING,
    attempt 0), our input topic for its ``nextTopic``."""
    rule = json.loads((FIXTURES / "rules" / rule_name).read_text().replace("\\{", "{"))
    event = json.loads((FIXTURES / "chat-message.json").read_text())
    event["correlationId"] = str(uuid.uuid4())
    event["message"]["text"] = "@bratty what game is this?"
    event["egress"]["destination"] = bus.egress_topic
    annotations = [
        {**a, "createdAt": NOW, "source": "event-router"}
        for a in rule["enrichments"]["annotations"]
    ]
    slip = rule.get("routingSlip") or rule["routing"]["slip"]
    steps = [
        {**s, "status": "PENDING", "attempt": 0, "nextTopic": bus.prefix + "-in"} for s in slip
    ]
    event["annotations"] = annotations
    event["routing"] = {"stage": "initial", "slip": steps + ([follow_up] if follow_up else [])}
    return event
