"""What llm-bot publishes of a behaviour profile, in BitBrat's shapes (``processor.ts``,
``processor.behavioral-tools.spec.ts``), and which tools each profile lets the model use."""

from __future__ import annotations

from typing import Any

import pytest

from llm_bot.events.models import AnnotationV1
from llm_bot.graph.behavior.annotations import (
    gated_annotations,
    profile_annotation,
    strategy_annotation,
    summary,
    tool_use,
)
from llm_bot.graph.behavior.profile import Profile, derive_profile

NOW = "2026-04-01T00:00:00.000Z"
TOOLS = ("upsertMemory", "deleteMemory")


def profile_of(
    intent: str = "question", level: str = "none", kind: str = "none", **tone: Any
) -> Profile:
    return derive_profile(
        [
            AnnotationV1(id="i", kind="intent", value=intent),
            AnnotationV1(id="t", kind="tone", payload=tone or {"valence": 0, "arousal": 0}),
            AnnotationV1(id="r", kind="risk", label=level, payload={"level": level, "type": kind}),
        ]
    )


def test_the_summary_is_bitbrats_behavior_profile_summary() -> None:
    assert summary(profile_of("critique", "med", "harassment", valence=-0.8, arousal=0.9)) == {
        "intent": "critique",
        "tone": {"valence": -0.8, "arousal": 0.9, "highArousal": True, "bucket": "excited"},
        "risk": {"level": "med", "type": "harassment"},
        "responseMode": "deescalate",
        "gate": "PROCEED",
        "policy": {
            "shouldRespond": True,
            "shouldUseTools": False,
            "shouldDeescalate": True,
            "shouldRefuse": False,
            "requiresSafeCompletion": False,
            "requiresEscalationAnnotation": False,
        },
    }


@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        (profile_of(level="high"), "high-risk traffic disables tools"),
        (profile_of(level="high", kind="privacy"), "high-risk traffic disables tools"),
        (profile_of(level="low", kind="self_harm"), "risk type self_harm disables tools"),
        (profile_of(kind="sexual"), "risk type sexual disables tools"),
        (
            profile_of(level="med", kind="harassment"),
            "medium-risk traffic disables tools by policy",
        ),
        (profile_of("meta"), "meta intent only allows internal status tools"),
        (profile_of("spam"), "behavior policy disabled tools for this request"),
        (
            profile_of("critique", valence=-1, arousal=0.8),
            "behavior policy disabled tools for this request",
        ),
    ],
)
def test_each_suppression_carries_bitbrats_reason(profile: Profile, reason: str) -> None:
    use = tool_use(profile, TOOLS)
    assert use.allowed == ()
    assert use.suppressed == tuple((tool, reason) for tool in TOOLS)
    assert tool_use(profile, TOOLS, enabled=False).allowed == TOOLS


def test_a_meta_question_keeps_only_the_internal_status_tools() -> None:
    names = ("internal:get_bot_status", "upsertMemory", "internal:list_available_tools")
    use = tool_use(profile_of("meta", "low"), names)
    assert use.allowed == ("internal:get_bot_status", "internal:list_available_tools")


@pytest.mark.parametrize("intent", ["question", "joke", "praise", "critique", "command"])
def test_a_calm_low_risk_message_keeps_every_tool(intent: str) -> None:
    use = tool_use(profile_of(intent, "low", "harassment"), TOOLS)
    assert (use.allowed, use.suppressed) == (TOOLS, ())


def test_the_annotations_of_a_gated_event() -> None:
    profile = profile_of(level="high", kind="illegal")
    behavior = profile_annotation(profile, NOW)
    strategy, decision = gated_annotations(profile, "ESCALATE", NOW)
    assert (behavior.kind, behavior.label, behavior.source) == (
        "behavior-profile",
        "refuse",
        "llm-bot",
    )
    assert behavior.payload == summary(profile)
    assert (strategy.kind, strategy.label) == ("response-strategy", "refuse")
    assert strategy.payload == {**summary(profile), "toolUse": "disabled", "gate": "ESCALATE"}
    assert (decision.kind, decision.label) == ("safety-decision", "escalate")
    assert decision.payload == {**summary(profile), "reason": "escalate"}
    assert len({behavior.id, strategy.id, decision.id}) == 3
    assert {a.created_at for a in (behavior, strategy, decision)} == {NOW}


def test_the_strategy_of_an_event_that_goes_to_the_model() -> None:
    profile = profile_of("meta")
    annotation = strategy_annotation(profile, tool_use(profile, TOOLS), NOW)
    assert annotation.label == "meta_explain"
    assert (annotation.payload or {})["toolUse"] == {
        "enabled": True,
        "allowedCount": 0,
        "suppressed": [
            {"tool": tool, "reason": "meta intent only allows internal status tools"}
            for tool in TOOLS
        ],
        "scopeSuppressed": [],
    }
