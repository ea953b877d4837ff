"""What a behaviour profile (:mod:`llm_bot.graph.behavior.profile`) says in words, in BitBrat's
exact texts (``behavior-profile.ts`` and ``processor.ts``, 0.33.3): the guidance lines of the
prompt's ``## [Constraints]`` section, the line its ``## [Task]`` section gains for the response
mode, and the canned safe refusals that answer a dangerous message without a model call."""

from __future__ import annotations

from llm_bot.graph.behavior.profile import Profile, ResponseMode, Risk, RiskType, Tone

_GUIDANCE_OF_MODE: dict[ResponseMode, str] = {
    "light_humor": "Use light humor without overcommitting or escalating the exchange.",
    "gratitude": "Acknowledge the positive feedback warmly and succinctly.",
    "brief_comply": (
        "Comply only if the request is safe and in scope; otherwise explain the limit briefly."
    ),
    "meta_explain": "Be transparent about the bot or system behavior relevant to the request.",
    "refuse": "Decline unsafe content clearly and without hostility.",
}

_TASK_OF_MODE: dict[ResponseMode, str] = {
    "light_humor": "Reply with light humor while staying grounded and concise.",
    "gratitude": "Acknowledge the praise appreciatively and keep the conversation moving.",
    "deescalate": "Address the request constructively and without defensiveness.",
    "brief_comply": (
        "Help briefly if the request is safe and in scope; otherwise explain the limit succinctly."
    ),
    "meta_explain": "Explain the relevant bot or system behavior plainly and transparently.",
    "refuse": "Decline unsafe or disallowed content clearly, calmly, and briefly.",
    "ignore": "Do not provide a normal conversational answer to the user request.",
}

_REFUSAL_OF_RISK: dict[RiskType, str] = {
    "self_harm": (
        "I can\u2019t help with harming yourself. If you\u2019re in immediate danger or think"
        " you might act on these thoughts, please call emergency services now or reach out to"
        " a local crisis hotline or a trusted person right away."
    ),
    "privacy": "I can\u2019t help expose or share someone\u2019s private or sensitive information.",
    "illegal": "I can\u2019t help with illegal or dangerous activity.",
    "sexual": "I can\u2019t help with that request.",
}
_REFUSAL = "I can\u2019t help with that request, but I can try to help with a safer alternative."


def guidance_lines(profile: Profile) -> list[str]:
    """BitBrat's behavioural constraints, in its order (each a ``(2)`` line of Constraints)."""
    lines = [
        f"Detected user intent: {profile.intent}.",
        f"Detected user tone: {describe_tone(profile.tone)}.",
        f"Detected safety risk: {describe_risk(profile.risk)}.",
    ]
    if profile.policy.should_deescalate:
        lines.append("Respond calmly and non-defensively.")
    if not profile.policy.should_use_tools:
        lines.append("Do not use tools for this request.")
    if profile.tone.high_arousal:
        lines.append("Keep the response brief and avoid escalating language.")
    if profile.policy.requires_safe_completion:
        lines.append("If you respond, keep the reply brief, supportive, and safe.")
    mode_line = _GUIDANCE_OF_MODE.get(profile.response_mode)
    if mode_line:
        lines.append(mode_line)
    return lines


def task_instruction(profile: Profile) -> str | None:
    """The task line of the response mode (a ``(2)`` task before the event's own), if any."""
    return _TASK_OF_MODE.get(profile.response_mode)


def describe_tone(tone: Tone) -> str:
    if tone.bucket == "hostile":
        feeling = "strongly negative"
    elif tone.bucket == "excited":
        feeling = (
            "negative" if tone.valence < -0.2 else "positive" if tone.valence > 0.2 else "neutral"
        )
    else:
        feeling = tone.bucket
    return f"{feeling} and {'high arousal' if tone.high_arousal else 'steady arousal'}"


def describe_risk(risk: Risk) -> str:
    if risk.level == "none":
        return "none"
    if risk.type == "none":
        return risk.level
    return f"{risk.level} {risk.type.replace('_', ' ')}"


def safe_refusal_text(profile: Profile) -> str:
    """The canned reply of a SAFE_REFUSAL gate, by risk type."""
    return _REFUSAL_OF_RISK.get(profile.risk.type, _REFUSAL)
