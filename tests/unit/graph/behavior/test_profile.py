"""The behaviour profile as BitBrat's ``behavior-profile.spec.ts`` and ``processor.test.ts``
specify it, then the whole class: every intent, every risk type at every level, tone extremes
and thresholds, and annotations of every JSON type (a fallback, never an error)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from llm_bot.events.models import AnnotationV1
from llm_bot.graph.behavior.profile import (
    INTENTS,
    RISK_LEVELS,
    RISK_TYPES,
    BehaviorSettings,
    Profile,
    derive_profile,
    js_number,
    tone_bucket,
)
from llm_bot.graph.behavior.texts import (
    describe_risk,
    describe_tone,
    guidance_lines,
    safe_refusal_text,
    task_instruction,
)
from llm_bot.settings import load_settings

DANGEROUS = {"self_harm", "privacy", "illegal", "sexual"}


def annotation(**fields: Any) -> AnnotationV1:
    return AnnotationV1.model_validate(
        {"id": "ann-1", "source": "test", "createdAt": "2026-04-01T00:00:00.000Z", **fields}
    )


def analyzed(
    intent: Any = "question", tone: Any = None, level: Any = "none", kind: Any = "none"
) -> Profile:
    """A profile of annotations shaped as BitBrat's query analyzer writes them."""
    return derive_profile(
        [
            annotation(kind="intent", label=intent, value=intent),
            annotation(kind="tone", payload=tone or {"valence": 0, "arousal": 0}),
            annotation(kind="risk", label=level, payload={"level": level, "type": kind}),
        ]
    )


# --- BitBrat's spec, case for case ----------------------------------------------------------


@pytest.mark.parametrize("annotations", [None, []])
def test_defaults_to_neutral_question_behavior_when_annotations_are_missing(
    annotations: list[AnnotationV1] | None,
) -> None:
    profile = derive_profile(annotations)
    assert profile.intent == "question"
    assert profile.tone.bucket == "neutral"
    assert (profile.risk.level, profile.risk.type) == ("none", "none")
    assert profile.response_mode == "answer"
    assert profile.policy.should_respond
    assert profile.policy.should_use_tools
    assert profile.gate == "PROCEED"


def test_normalizes_intent_tone_and_risk_annotations_from_a_single_extractor_path() -> None:
    profile = derive_profile(
        [
            annotation(kind="intent", value="critique", label="critique"),
            annotation(kind="tone", payload={"valence": -0.85, "arousal": 0.92}),
            annotation(kind="risk", label="med", payload={"level": "medium", "type": "harassment"}),
        ]
    )
    assert profile.intent == "critique"
    assert profile.tone.bucket == "excited"
    assert profile.tone.high_arousal
    assert (profile.risk.level, profile.risk.type) == ("med", "harassment")
    assert profile.response_mode == "deescalate"
    assert not profile.policy.should_use_tools
    assert profile.policy.should_deescalate
    assert profile.gate == "PROCEED"


def test_defaults_malformed_annotations_defensively() -> None:
    profile = derive_profile(
        [
            annotation(kind="intent", value="unknown-mode"),
            annotation(kind="tone", payload={"valence": "bogus", "arousal": None}),
            annotation(kind="risk", label="surprise", payload={"level": "surprise", "type": "x"}),
        ]
    )
    assert profile.intent == "question"
    assert (profile.tone.valence, profile.tone.arousal) == (0, 0)
    assert (profile.tone.bucket, profile.tone.high_arousal) == ("neutral", False)
    assert (profile.risk.level, profile.risk.type) == ("none", "none")
    assert profile.response_mode == "answer"


def test_risk_precedence_overrides_intent_and_tone_for_high_risk_events() -> None:
    profile = derive_profile(
        [
            annotation(kind="intent", value="joke"),
            annotation(kind="tone", payload={"valence": 0.9, "arousal": 0.4}),
            annotation(kind="risk", label="high", payload={"level": "high", "type": "illegal"}),
        ],
        "safe-complete",
    )
    assert profile.response_mode == "refuse"
    assert not profile.policy.should_respond
    assert profile.policy.should_refuse
    assert profile.policy.requires_escalation_annotation
    assert profile.gate == "ESCALATE"


def test_safe_complete_mode_marks_medium_risk_self_harm_for_safe_completion() -> None:
    profile = derive_profile(
        [
            annotation(kind="intent", value="question"),
            annotation(kind="risk", label="med", payload={"level": "med", "type": "self_harm"}),
        ],
        "safe-complete",
    )
    assert profile.response_mode == "refuse"
    assert profile.policy.requires_safe_completion
    assert not profile.policy.should_use_tools
    assert profile.gate == "SAFE_REFUSAL"


def test_tone_bucket_thresholds_are_deterministic() -> None:
    assert tone_bucket(-0.7, 0.2) == "hostile"
    assert tone_bucket(-0.4, 0.1) == "negative"
    assert tone_bucket(0.1, 0.1) == "neutral"
    assert tone_bucket(0.5, 0.2) == "positive"
    assert tone_bucket(0.5, 0.8) == "excited"


def test_behavioral_guidance_stays_human_readable_and_policy_oriented() -> None:
    profile = analyzed("meta", {"valence": -0.3, "arousal": 0.8}, "low")
    assert guidance_lines(profile) == [
        "Detected user intent: meta.",
        "Detected user tone: negative and high arousal.",
        "Detected safety risk: low.",
        "Keep the response brief and avoid escalating language.",
        "Be transparent about the bot or system behavior relevant to the request.",
    ]


def test_critique_in_anger_adds_calm_guidance_and_the_deescalation_task() -> None:
    """``processor.test.ts``: "adds behavioral guidance to the assembled prompt"."""
    profile = analyzed("critique", {"valence": -0.8, "arousal": 0.9}, "low")
    lines = guidance_lines(profile)
    assert "Detected user intent: critique." in lines
    assert "Respond calmly and non-defensively." in lines
    assert "Do not use tools for this request." in lines
    assert task_instruction(profile) == (
        "Address the request constructively and without defensiveness."
    )


# --- the class: every risk type at every level ------------------------------------------------


@pytest.mark.parametrize("level", RISK_LEVELS)
@pytest.mark.parametrize("kind", RISK_TYPES)
@pytest.mark.parametrize("mode", ["refuse", "safe-complete"])
def test_every_risk_type_at_every_level(kind: str, level: str, mode: Any) -> None:
    profile = derive_profile(analyzed_annotations("question", level, kind), mode)
    dangerous = kind in DANGEROUS
    if level == "high":
        gate, response = "ESCALATE", "refuse"
    elif dangerous:
        gate, response = "SAFE_REFUSAL", "refuse" if level == "med" else "answer"
    else:
        gate, response = (
            "PROCEED",
            "deescalate" if (level, kind) == ("med", "harassment") else "answer",
        )
    assert (profile.gate, profile.response_mode) == (gate, response)
    assert profile.policy.should_use_tools == (level in ("none", "low") and not dangerous)
    assert profile.policy.should_refuse == (level == "high" or dangerous)
    assert profile.policy.should_respond == (level != "high")
    assert profile.policy.requires_escalation_annotation == (level == "high")
    safe = level == "med" and (kind == "self_harm" or (dangerous and mode == "safe-complete"))
    assert profile.policy.requires_safe_completion == safe
    assert profile.policy.should_deescalate == (kind == "harassment" or response == "deescalate")
    assert describe_risk(profile.risk) == (
        "none"
        if level == "none"
        else level
        if kind == "none"
        else f"{level} {kind.replace('_', ' ')}"
    )


def analyzed_annotations(intent: str, level: str, kind: str) -> list[AnnotationV1]:
    return [
        annotation(kind="intent", label=intent, value=intent),
        annotation(kind="risk", label=level, payload={"level": level, "type": kind}),
    ]


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        (
            "self_harm",
            "I can\u2019t help with harming yourself. If you\u2019re in immediate danger",
        ),
        ("privacy", "I can\u2019t help expose or share someone\u2019s private or sensitive"),
        ("illegal", "I can\u2019t help with illegal or dangerous activity."),
        ("sexual", "I can\u2019t help with that request."),
    ],
)
def test_each_dangerous_risk_type_has_its_refusal(kind: str, text: str) -> None:
    refusal = safe_refusal_text(analyzed(level="med", kind=kind))
    assert refusal.startswith(text)
    if kind == "self_harm":
        assert "call emergency services now or reach out to a local crisis hotline" in refusal


def test_spellings_the_analyzer_may_use_are_normalised() -> None:
    profile = analyzed(" Joke ", level=" MEDIUM ", kind="Self-Harm")
    assert (profile.intent, profile.risk.level, profile.risk.type) == ("joke", "med", "self_harm")
    assert analyzed(level="low", kind="self harm").risk.type == "self_harm"


def test_the_risk_label_stands_in_for_a_missing_level_and_the_first_annotation_counts() -> None:
    labelled = derive_profile([annotation(kind="risk", label="high", payload={"type": "spam"})])
    assert (labelled.risk.level, labelled.gate) == ("high", "ESCALATE")
    first = derive_profile(
        [
            annotation(kind="intent", value="spam"),
            annotation(kind="intent", value="praise"),
        ]
    )
    assert first.gate == "NO_RESPONSE"


# --- every intent -----------------------------------------------------------------------------

MODES = {
    "question": ("answer", None),
    "joke": ("light_humor", "Reply with light humor while staying grounded and concise."),
    "praise": (
        "gratitude",
        "Acknowledge the praise appreciatively and keep the conversation moving.",
    ),
    "critique": (
        "deescalate",
        "Address the request constructively and without defensiveness.",
    ),
    "command": (
        "brief_comply",
        "Help briefly if the request is safe and in scope; otherwise explain the limit succinctly.",
    ),
    "meta": (
        "meta_explain",
        "Explain the relevant bot or system behavior plainly and transparently.",
    ),
    "spam": ("ignore", "Do not provide a normal conversational answer to the user request."),
}


@pytest.mark.parametrize("intent", INTENTS)
def test_every_intent(intent: str) -> None:
    profile = analyzed(intent)
    mode, task = MODES[intent]
    assert (profile.intent, profile.response_mode) == (intent, mode)
    assert task_instruction(profile) == task
    assert profile.gate == ("NO_RESPONSE" if intent == "spam" else "PROCEED")
    assert profile.policy.should_use_tools == (intent != "spam")
    assert profile.policy.should_respond == (intent != "spam")
    assert profile.policy.should_deescalate == (intent == "critique")
    assert guidance_lines(profile)[:3] == [
        f"Detected user intent: {intent}.",
        "Detected user tone: neutral and steady arousal.",
        "Detected safety risk: none.",
    ]
    assert ("Do not use tools for this request." in guidance_lines(profile)) == (intent == "spam")


def test_a_critique_loses_its_tools_at_high_arousal_only() -> None:
    assert not analyzed("critique", {"valence": 0, "arousal": 0.7}).policy.should_use_tools
    assert analyzed("critique", {"valence": 0, "arousal": 0.69}).policy.should_use_tools
    assert analyzed("joke", {"valence": 0, "arousal": 1}).policy.should_use_tools


# --- tone -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("valence", "arousal", "bucket", "described"),
    [
        (-1, -1, "hostile", "strongly negative and steady arousal"),
        (-1, 1, "excited", "negative and high arousal"),
        (1, -1, "positive", "positive and steady arousal"),
        (1, 1, "excited", "positive and high arousal"),
        (0, 1, "excited", "neutral and high arousal"),
        (0, 0, "neutral", "neutral and steady arousal"),
        (-0.6, 0.69, "hostile", "strongly negative and steady arousal"),
        (-0.59, 0, "negative", "negative and steady arousal"),
        (-0.2, 0, "neutral", "neutral and steady arousal"),
        (0.2, 0, "neutral", "neutral and steady arousal"),
        (0.21, 0, "positive", "positive and steady arousal"),
        (-7, 42, "excited", "negative and high arousal"),  # clamped to [-1, 1]
    ],
)
def test_tone_extremes_and_thresholds(
    valence: float, arousal: float, bucket: str, described: str
) -> None:
    profile = analyzed(tone={"valence": valence, "arousal": arousal})
    assert profile.tone.bucket == bucket
    assert describe_tone(profile.tone) == described
    assert -1 <= profile.tone.valence <= 1
    assert -1 <= profile.tone.arousal <= 1
    hostile = bucket == "hostile"
    assert profile.policy.should_deescalate == hostile
    assert ("Respond calmly and non-defensively." in guidance_lines(profile)) == hostile
    high = profile.tone.arousal >= 0.7
    brief = "Keep the response brief and avoid escalating language."
    assert (brief in guidance_lines(profile)) == high


# --- annotations of any JSON type -------------------------------------------------------------

ANY_JSON = [None, True, False, 0, -3, 2.5, "", "   ", "HIGH!", [], [1, 2], ["med"], {}, {"a": 1}]


@pytest.mark.parametrize("bad", ANY_JSON)
def test_any_json_value_in_any_field_gives_a_profile(bad: Any) -> None:
    for profile in (
        derive_profile([annotation(kind="intent", value=bad, label=bad)]),
        derive_profile([annotation(kind="tone", payload={"valence": bad, "arousal": bad})]),
        derive_profile([annotation(kind="risk", label=bad, payload={"level": bad, "type": bad})]),
        derive_profile([annotation(kind="risk", value=bad, payload=bad)]),
        derive_profile([annotation(kind="tone", payload=bad)]),
    ):
        assert profile.intent == "question"
        assert (profile.risk.level, profile.risk.type) == ("none", "none")
        assert profile.gate == "PROCEED"
        assert math.isfinite(profile.tone.valence)
        assert -1 <= profile.tone.arousal <= 1


def test_an_intent_value_of_another_type_hides_the_label_as_in_javascript() -> None:
    """``value ?? label``: only null falls through to the label."""
    assert derive_profile([annotation(kind="intent", value=5, label="spam")]).intent == "question"
    assert derive_profile([annotation(kind="intent", value=None, label="spam")]).intent == "spam"


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (None, 0.0),
        (True, 1.0),
        (False, 0.0),
        (0.25, 0.25),
        ("0.8", 0.8),
        (" -0.5\n", -0.5),
        ("", 0.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e-1", 0.1),
        ("0x1f", 31.0),
        ("0b11", 3.0),
        ("0o17", 15.0),
        ([], 0.0),
        ([None], 0.0),
        (["0.3"], 0.3),
        ([[0.4]], 0.4),
        ("Infinity", math.inf),
    ],
)
def test_scores_are_read_as_javascripts_number_reads_them(value: Any, number: float) -> None:
    assert js_number(value) == number


@pytest.mark.parametrize(
    "value", ["abc", "inf", "nan", "1_0", "0x", "-0x1", "1 2", "\u0663", [1, 2], [True], {}]
)
def test_what_javascript_cannot_read_as_a_number_is_nan_and_scores_zero(value: Any) -> None:
    assert math.isnan(js_number(value))
    assert analyzed(tone={"valence": value, "arousal": value}).tone.valence == 0.0


def test_a_tone_given_as_text_is_read() -> None:
    profile = analyzed("critique", {"valence": "-0.9", "arousal": "0.95"})
    assert (profile.tone.bucket, profile.tone.high_arousal) == ("excited", True)
    assert not profile.policy.should_use_tools


# --- the rollout flags ------------------------------------------------------------------------


def test_gating_off_lets_every_profile_proceed() -> None:
    escalated = analyzed(level="high", kind="illegal")
    behavior = BehaviorSettings.from_settings(load_settings())
    assert behavior.gate(escalated) == "ESCALATE"
    assert replace(behavior, gating=False).gate(escalated) == "PROCEED"
