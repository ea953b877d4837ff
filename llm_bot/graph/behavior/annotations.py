"""What llm-bot publishes about a behaviour profile, shaped as BitBrat's llm-bot publishes it
(``processor.ts``, 0.33.3), and which tools the profile lets the model use.

Every processed event gains a ``behavior-profile`` annotation (label: the response mode,
payload: :func:`summary`). An event the gate stops gains ``response-strategy`` (``toolUse:
"disabled"`` and the gate) and ``safety-decision`` (label and ``reason``: the gate in lower case:
``safe_refusal``, ``no_response``, ``escalate``); one that goes to the model gains
``response-strategy`` with ``toolUse``: whether filtering is on, how many tools were offered,
each tool the profile suppressed with BitBrat's reason, and each held back by the event's
``metadata.scope`` (:mod:`llm_bot.graph.offering`). Candidates carry the summary as
``metadata.behaviorProfile``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from llm_bot.events.models import SOURCE, AnnotationV1
from llm_bot.graph.behavior.profile import DANGEROUS_RISK_TYPES, Gate, Profile

# The only tools BitBrat lets a meta question use: two of the built-ins
# (llm_bot.platform_tools.builtins).
META_TOOL_ALLOWLIST = frozenset({"internal:get_bot_status", "internal:list_available_tools"})


@dataclass(frozen=True)
class ToolUse:
    """The tools offered to the model for one event, and those the profile held back."""

    enabled: bool  # LLM_BOT_BEHAVIORAL_TOOL_FILTER_ENABLED
    allowed: tuple[str, ...]
    suppressed: tuple[tuple[str, str], ...]  # (tool, reason)
    scope_suppressed: tuple[tuple[str, str], ...] = ()  # (tool, reason)


def tool_use(
    profile: Profile,
    tools: Iterable[str],
    enabled: bool = True,
    scope_suppressed: tuple[tuple[str, str], ...] = (),
) -> ToolUse:
    """The profile's filter over tool ids (a memory tool's id is its name), after the role and
    scope filters, which ``scope_suppressed`` reports."""
    allowed: list[str] = []
    suppressed: list[tuple[str, str]] = []
    for name in tools:
        reason = _suppression(profile, name) if enabled else None
        if reason is None:
            allowed.append(name)
        else:
            suppressed.append((name, reason))
    return ToolUse(enabled, tuple(allowed), tuple(suppressed), scope_suppressed)


def _suppression(profile: Profile, tool: str) -> str | None:
    """BitBrat's reason to hold ``tool`` back from this profile, or None to offer it."""
    risk = profile.risk
    if risk.level == "high":
        return "high-risk traffic disables tools"
    if risk.type in DANGEROUS_RISK_TYPES:
        return f"risk type {risk.type} disables tools"
    if risk.level == "med":
        return "medium-risk traffic disables tools by policy"
    if profile.intent == "meta":
        if tool in META_TOOL_ALLOWLIST:
            return None
        return "meta intent only allows internal status tools"
    if not profile.policy.should_use_tools:
        return "behavior policy disabled tools for this request"
    return None


def summary(profile: Profile) -> dict[str, Any]:
    """BitBrat's ``behaviorProfileSummary``: the payload of every behaviour annotation."""
    tone, risk, policy = profile.tone, profile.risk, profile.policy
    return {
        "intent": profile.intent,
        "tone": {
            "valence": tone.valence,
            "arousal": tone.arousal,
            "highArousal": tone.high_arousal,
            "bucket": tone.bucket,
        },
        "risk": {"level": risk.level, "type": risk.type},
        "responseMode": profile.response_mode,
        "gate": profile.gate,
        "policy": {
            "shouldRespond": policy.should_respond,
            "shouldUseTools": policy.should_use_tools,
            "shouldDeescalate": policy.should_deescalate,
            "shouldRefuse": policy.should_refuse,
            "requiresSafeCompletion": policy.requires_safe_completion,
            "requiresEscalationAnnotation": policy.requires_escalation_annotation,
        },
    }


def profile_annotation(profile: Profile, now: str) -> AnnotationV1:
    return _annotation("behavior-profile", profile.response_mode, summary(profile), now)


def gated_annotations(profile: Profile, gate: Gate, now: str) -> list[AnnotationV1]:
    """``response-strategy`` and ``safety-decision`` of an event the gate stopped."""
    decision = gate.lower()
    return [
        _annotation(
            "response-strategy",
            profile.response_mode,
            {**summary(profile), "toolUse": "disabled", "gate": gate},
            now,
        ),
        _annotation("safety-decision", decision, {**summary(profile), "reason": decision}, now),
    ]


def strategy_annotation(profile: Profile, tools: ToolUse, now: str) -> AnnotationV1:
    """``response-strategy`` of an event that went to the model."""
    use = {
        "enabled": tools.enabled,
        "allowedCount": len(tools.allowed),
        "suppressed": [{"tool": tool, "reason": reason} for tool, reason in tools.suppressed],
        "scopeSuppressed": [
            {"tool": tool, "reason": reason} for tool, reason in tools.scope_suppressed
        ],
    }
    return _annotation(
        "response-strategy", profile.response_mode, {**summary(profile), "toolUse": use}, now
    )


def _annotation(kind: str, label: str, payload: dict[str, Any], now: str) -> AnnotationV1:
    return AnnotationV1(
        id=str(uuid4()), kind=kind, source=SOURCE, created_at=now, label=label, payload=payload
    )
