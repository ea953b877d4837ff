"""The behaviour profile of one message, derived as BitBrat's llm-bot derives it
(``src/services/llm-bot/behavior-profile.ts``, 0.33.3): pure functions, no I/O.

BitBrat's query analyzer puts three annotations on a chat message: ``intent`` (``value`` and
``label``: question, joke, praise, critique, command, meta or spam), ``tone`` (``payload``:
``valence`` and ``arousal`` in [-1, 1]) and ``risk`` (``label`` and ``payload``: ``level`` none,
low, med or high; ``type`` none, harassment, spam, privacy, self_harm, sexual or illegal). The
first annotation of each kind counts. They are read with BitBrat's fallbacks, so a value of any
JSON type gives a profile, never an error: an unknown intent is a question; a tone score is read
as JavaScript's ``Number()`` reads it ("0.8" is 0.8, ``true`` is 1), a non-finite one is 0 and
the rest is clamped to [-1, 1]; a risk level is ``payload.level``, else the ``label`` ("medium"
is med), anything else none; a risk type is ``payload.type`` with spaces and dashes as
underscores, anything else none. Risk comes before intent, intent before tone.

The profile decides the *gate*, before any model call or memory access
(:mod:`llm_bot.graph.nodes.ingest_prompt`): high risk escalates (SKIP), spam gets no response
(SKIP), a dangerous risk type (self_harm, privacy, illegal, sexual; at any level) or medium
self-harm gets the canned safe refusal; everything else proceeds to the model, tools offered
only when the policy allows them (:func:`tool_use`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from llm_bot.events.models import AnnotationV1
from llm_bot.settings import Settings

Intent = Literal["question", "joke", "praise", "critique", "command", "meta", "spam"]
ToneBucket = Literal["hostile", "negative", "neutral", "positive", "excited"]
RiskLevel = Literal["none", "low", "med", "high"]
RiskType = Literal["none", "harassment", "spam", "privacy", "self_harm", "sexual", "illegal"]
ResponseMode = Literal[
    "answer",
    "light_humor",
    "gratitude",
    "deescalate",
    "brief_comply",
    "meta_explain",
    "refuse",
    "ignore",
]
Gate = Literal["PROCEED", "SAFE_REFUSAL", "NO_RESPONSE", "ESCALATE"]
RiskResponseMode = Literal["refuse", "safe-complete"]

INTENTS: tuple[Intent, ...] = get_args(Intent)
RISK_LEVELS: tuple[RiskLevel, ...] = get_args(RiskLevel)
RISK_TYPES: tuple[RiskType, ...] = get_args(RiskType)
DANGEROUS_RISK_TYPES: frozenset[RiskType] = frozenset({"self_harm", "privacy", "illegal", "sexual"})
HIGH_AROUSAL = 0.7


@dataclass(frozen=True)
class Tone:
    valence: float
    arousal: float
    bucket: ToneBucket
    high_arousal: bool


@dataclass(frozen=True)
class Risk:
    level: RiskLevel
    type: RiskType


@dataclass(frozen=True)
class Policy:
    should_respond: bool
    should_use_tools: bool
    should_deescalate: bool
    should_refuse: bool
    requires_safe_completion: bool
    requires_escalation_annotation: bool


@dataclass(frozen=True)
class Profile:
    intent: Intent
    tone: Tone
    risk: Risk
    policy: Policy
    response_mode: ResponseMode
    gate: Gate


NEUTRAL_TONE = Tone(0.0, 0.0, "neutral", False)
NO_RISK = Risk("none", "none")


@dataclass(frozen=True)
class BehaviorSettings:
    """BitBrat's behavioural rollout flags, under its names (``LLM_BOT_BEHAVIORAL_*_ENABLED``,
    ``LLM_BOT_RISK_RESPONSE_MODE``), all on and ``refuse`` by default as in BitBrat."""

    gating: bool
    tool_filter: bool
    guidance: bool
    risk_response_mode: RiskResponseMode

    @classmethod
    def from_settings(cls, settings: Settings) -> BehaviorSettings:
        return cls(
            gating=settings.behavioral_gating_enabled,
            tool_filter=settings.behavioral_tool_filter_enabled,
            guidance=settings.behavioral_guidance_enabled,
            risk_response_mode=settings.risk_response_mode,
        )

    def gate(self, profile: Profile) -> Gate:
        """The gate applied: the profile's, or PROCEED when gating is off."""
        return profile.gate if self.gating else "PROCEED"


def derive_profile(
    annotations: Sequence[AnnotationV1] | None, risk_response_mode: RiskResponseMode = "refuse"
) -> Profile:
    """The profile of an event's annotations (None or none of the three: a neutral question)."""
    intent_annotation = _first(annotations, "intent")
    tone_annotation = _first(annotations, "tone")
    risk_annotation = _first(annotations, "risk")
    tone_payload = _record(tone_annotation.payload if tone_annotation else None)
    risk_payload = _record(risk_annotation.payload if risk_annotation else None)

    intent = _intent(_first_set(intent_annotation, "value", "label"))
    valence = _score(tone_payload.get("valence"))
    arousal = _score(tone_payload.get("arousal"))
    tone = Tone(valence, arousal, tone_bucket(valence, arousal), arousal >= HIGH_AROUSAL)
    level_source = risk_payload.get("level")
    if level_source is None and risk_annotation is not None:
        level_source = risk_annotation.label
    risk = Risk(_risk_level(level_source), _risk_type(risk_payload.get("type")))
    mode = _response_mode(intent, risk)
    policy = _policy(intent, tone, risk, mode, risk_response_mode)
    return Profile(intent, tone, risk, policy, mode, _gate(risk, intent, policy))


def tone_bucket(valence: float, arousal: float) -> ToneBucket:
    if arousal >= HIGH_AROUSAL:
        return "excited"
    if valence <= -0.6:
        return "hostile"
    if valence < -0.2:
        return "negative"
    if valence <= 0.2:
        return "neutral"
    return "positive"


def _response_mode(intent: Intent, risk: Risk) -> ResponseMode:
    if risk.level == "high":
        return "refuse"
    if risk.level == "med":
        if risk.type in DANGEROUS_RISK_TYPES:
            return "refuse"
        if risk.type == "harassment":
            return "ignore" if intent == "spam" else "deescalate"
    return _MODE_OF_INTENT[intent]


_MODE_OF_INTENT: Mapping[Intent, ResponseMode] = {
    "question": "answer",
    "joke": "light_humor",
    "praise": "gratitude",
    "critique": "deescalate",
    "command": "brief_comply",
    "meta": "meta_explain",
    "spam": "ignore",
}


def _policy(
    intent: Intent, tone: Tone, risk: Risk, mode: ResponseMode, risk_mode: RiskResponseMode
) -> Policy:
    high = risk.level == "high"
    medium = risk.level == "med"
    dangerous = risk.type in DANGEROUS_RISK_TYPES
    return Policy(
        should_respond=not high and intent != "spam",
        should_use_tools=not high
        and not medium
        and intent != "spam"
        and not (intent == "critique" and tone.high_arousal)
        and not dangerous,
        should_deescalate=mode == "deescalate"
        or risk.type == "harassment"
        or tone.bucket == "hostile",
        should_refuse=high or dangerous,
        requires_safe_completion=medium
        and (risk.type == "self_harm" or (dangerous and risk_mode == "safe-complete")),
        requires_escalation_annotation=high,
    )


def _gate(risk: Risk, intent: Intent, policy: Policy) -> Gate:
    if risk.level == "high":
        return "ESCALATE"
    if intent == "spam":
        return "NO_RESPONSE"
    if policy.should_refuse or policy.requires_safe_completion:
        return "SAFE_REFUSAL"
    return "PROCEED"


# --- reading the annotations as BitBrat reads them -----------------------------------------


def _first(annotations: Sequence[AnnotationV1] | None, kind: str) -> AnnotationV1 | None:
    return next((a for a in annotations or () if a.kind == kind), None)


def _first_set(annotation: AnnotationV1 | None, *fields: str) -> Any:
    """JavaScript's ``a.x ?? a.y``: the first field that is not null."""
    if annotation is None:
        return None
    return next((v for f in fields if (v := getattr(annotation, f)) is not None), None)


def _record(payload: object) -> Mapping[str, Any]:
    return payload if isinstance(payload, dict) else {}


# JavaScript's String.prototype.trim removes these (WhiteSpace and LineTerminator).
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
_JS_SPACE += "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def _text(value: object) -> str | None:
    """Trimmed and lower-cased text, or None for a non-string or blank value."""
    if not isinstance(value, str):
        return None
    return value.strip(_JS_SPACE).lower() or None


def _intent(value: object) -> Intent:
    text = _text(value)
    return text if text in INTENTS else "question"


def _risk_level(value: object) -> RiskLevel:
    text = _text(value)
    if text == "medium":
        return "med"
    return text if text in RISK_LEVELS else "none"


_SPACES_AND_DASHES = re.compile(r"[\s-]+")


def _risk_type(value: object) -> RiskType:
    text = _text(value)
    normalized = _SPACES_AND_DASHES.sub("_", text) if text else None
    return normalized if normalized in RISK_TYPES else "none"


def _score(value: object) -> float:
    number = js_number(value)
    if not math.isfinite(number):
        return 0.0
    return max(-1.0, min(1.0, number))


# Unambiguous (each digit has one place to go), so matching stays linear on any text.
_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_RADIX = {"x": 16, "o": 8, "b": 2}
_NON_DECIMAL = re.compile(r"0([xXoObB])([0-9a-fA-F]+)")


def js_number(value: object) -> float:
    """JavaScript's ``Number(value)`` of a JSON value: NaN where JavaScript gives NaN."""
    if value is None:
        return 0.0  # Number(null); a missing key (undefined) is NaN, and both score 0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond any double: Infinity in JavaScript
            return math.inf
    if isinstance(value, str):
        return _string_number(value)
    if isinstance(value, list):  # an array is read as its elements joined by ","
        if not value:
            return 0.0
        if len(value) > 1 or isinstance(value[0], bool):  # "1,2"; "true"
            return math.nan
        return js_number(value[0])
    return math.nan  # an object: "[object Object]"


def _string_number(value: str) -> float:
    text = value.strip(_JS_SPACE)
    if not text:
        return 0.0
    if _DECIMAL.fullmatch(text):
        return float(text)
    radix = _NON_DECIMAL.fullmatch(text)
    if radix:
        try:
            return float(int(radix.group(2), _RADIX[radix.group(1).lower()]))
        except (ValueError, OverflowError):
            return math.nan
    return math.nan
