"""BitBrat's behaviour layer through the handler, with events as its router and query
analyzer shape them: every risk type at every level, every intent at calm and at furious
tones, and BitBrat's rollout flags. Each test serves its whole class from one worker.

What BitBrat's llm-bot does (``processor.ts``, ``behavior-profile.ts``), and so must we: high
risk is SKIP with ``safety-decision: escalate``; spam is SKIP with ``no_response``; a dangerous
risk type (self_harm, privacy, illegal, sexual) at any lower level gets the canned refusal (OK,
priority 5) without a model call; the rest reach the model, without tools at medium risk, for
spam, a meta question or a critique at high arousal.
"""

from __future__ import annotations

import pytest

from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.memory_bus import MemoryBus
from .analyzed import (
    DANGEROUS,
    added,
    analysis,
    answers,
    assert_answered,
    assert_stopped,
    chat_event,
    model_calls,
)

pytestmark = pytest.mark.integration

LEVELS = ("none", "low", "med", "high")
TYPES = ("none", "harassment", "spam", "privacy", "self_harm", "sexual", "illegal")
INTENT_MODES = {
    "question": "answer",
    "joke": "light_humor",
    "praise": "gratitude",
    "critique": "deescalate",
    "command": "brief_comply",
    "meta": "meta_explain",
}


async def test_every_risk_type_at_every_level(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    cases = {(level, kind): analysis(level=level, kind=kind) for level in LEVELS for kind in TYPES}
    events = {case: chat_event(bus, annotations) for case, annotations in cases.items()}
    async with bus.serving(bus.settings()):
        published = await answers(bus, list(events.values()))

    for (level, kind), event in events.items():
        document = published[event["correlationId"]]
        calls = model_calls(model_server, event)
        case = f"risk {level} {kind}"
        assert added(document, "behavior-profile")[0]["payload"]["risk"] == {
            "level": level,
            "type": kind,
        }, case
        if level == "high":
            assert_stopped(document, calls, "ESCALATE", kind)
        elif kind in DANGEROUS:
            assert_stopped(document, calls, "SAFE_REFUSAL", kind)
        elif level == "med":
            mode = "deescalate" if kind == "harassment" else "answer"
            assert_answered(document, calls, mode, "medium-risk traffic disables tools by policy")
        else:
            assert_answered(document, calls, "answer", None)


async def test_every_intent_at_calm_and_furious_tones(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    tones = {"calm": (0.0, 0.0), "furious": (-1.0, 1.0), "glowing": (1.0, -1.0)}
    cases = {
        (intent, tone): analysis(intent, valence, arousal)
        for intent in [*INTENT_MODES, "spam"]
        for tone, (valence, arousal) in tones.items()
    }
    events = {case: chat_event(bus, annotations) for case, annotations in cases.items()}
    async with bus.serving(bus.settings()):
        published = await answers(bus, list(events.values()))

    for (intent, tone), event in events.items():
        document = published[event["correlationId"]]
        calls = model_calls(model_server, event)
        [profile] = added(document, "behavior-profile")
        assert profile["payload"]["intent"] == intent
        assert profile["payload"]["tone"]["highArousal"] == (tone == "furious")
        if intent == "spam":
            assert_stopped(document, calls, "NO_RESPONSE", "none")
        elif intent == "meta":
            reason = "meta intent only allows internal status tools"
            assert_answered(document, calls, "meta_explain", reason)
        elif intent == "critique" and tone == "furious":
            reason = "behavior policy disabled tools for this request"
            assert_answered(document, calls, "deescalate", reason)
        else:
            assert_answered(document, calls, INTENT_MODES[intent], None)


async def test_bitbrats_rollout_flags_turn_gating_and_tool_filtering_off(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    """``LLM_BOT_BEHAVIORAL_GATING_ENABLED`` and ``..._TOOL_FILTER_ENABLED`` off: every event
    reaches the model with every tool; ``LLM_BOT_RISK_RESPONSE_MODE=safe-complete`` marks
    medium privacy for safe completion."""
    cases = {
        "medium privacy": analysis(level="med", kind="privacy"),
        "high illegal": analysis(level="high", kind="illegal"),
        "spam": analysis("spam"),
    }
    events = {case: chat_event(bus, annotations) for case, annotations in cases.items()}
    settings = bus.settings(
        LLM_BOT_BEHAVIORAL_GATING_ENABLED="false",
        LLM_BOT_BEHAVIORAL_TOOL_FILTER_ENABLED="false",
        LLM_BOT_RISK_RESPONSE_MODE="safe-complete",
    )
    async with bus.serving(settings):
        published = await answers(bus, list(events.values()))

    for case, event in events.items():
        document = published[event["correlationId"]]
        [call] = model_calls(model_server, event)
        assert call.get("tools"), case
        [profile] = added(document, "behavior-profile")
        [strategy] = added(document, "response-strategy")
        assert added(document, "safety-decision") == [], case
        assert strategy["payload"]["toolUse"]["enabled"] is False
        assert strategy["payload"]["toolUse"]["suppressed"] == []
        assert document["candidates"][0]["text"] == "echo: " + event["message"]["text"]
        safe_completion = profile["payload"]["policy"]["requiresSafeCompletion"]
        assert safe_completion == (case == "medium privacy"), case
