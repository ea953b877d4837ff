"""Node ``ingest_prompt``: the event's behaviour profile and gate, then what it asks
(:mod:`llm_bot.graph.prompt.composition`) becomes this run's user message, named after its
speaker in a shared channel as every user turn there is (:mod:`llm_bot.memory.rendering`). An
event that sets no task ends the run here (SKIP), as does one the gate stops. Personalities
named by the event are looked up here, once per run (``GraphContext.personalities``).

The gate (:mod:`llm_bot.graph.behavior.profile`) is decided first, before any model call and before
memory is read or written: an event it stops never reaches ``retrieve_memories``, so nothing
is recalled, embedded, offered as a tool or stored. A SAFE_REFUSAL ends with BitBrat's canned
refusal as the candidate (OK); ESCALATE and NO_RESPONSE end without one (SKIP). Neither keeps
a history pair: a message that was refused or escalated (a crisis message among them) is kept
nowhere it could be recalled, quoted or summarised later, in a shared channel least of all
(:attr:`llm_bot.answer.unit.Answer.pair` is ``None``). Only the processed-events ledger keeps
the published event, as it keeps every output, so a redelivery republishes the same result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from llm_bot.clock import iso_timestamp
from llm_bot.events.models import InternalEventV2
from llm_bot.explanation.record import BehaviourDecision, Record, section
from llm_bot.graph.behavior.profile import Gate, Profile, derive_profile
from llm_bot.graph.behavior.texts import guidance_lines, task_instruction
from llm_bot.graph.nodes.build_candidate import refusal_candidate
from llm_bot.graph.prompt.composition import (
    Identity,
    Rendered,
    Request,
    join_sections,
    request_of,
    resolve_identity,
)
from llm_bot.graph.prompt.sections import system_prompt_section
from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.rendering import speaker_name
from llm_bot.memory.run_writes import RunWrites
from llm_bot.telemetry.traces import annotate_current


async def ingest_prompt(
    state: GraphState, runtime: Runtime[GraphContext]
) -> Command[Literal["retrieve_memories", "__end__"]]:
    event = state["event"]
    context = runtime.context
    profile = derive_profile(event.annotations, context.behavior.risk_response_mode)
    request = request_of(event, context.prompt)
    if request is None:
        return Command(update={"profile": profile}, goto="__end__")  # LangGraph's END
    gate = context.behavior.gate(profile)
    annotate_current({"gen_ai.guardrail.result": gate})
    if gate != "PROCEED":
        return Command(update=_stopped(state, context, profile, gate), goto="__end__")
    identity = await resolve_identity(
        request.personalities, context.personalities, context.retrieval_timeout_s
    )
    inbound = state["inbound"]
    user_id, direct = inbound.user_id, inbound.direct
    name = None if direct else speaker_name(user_id)
    sections = _sections(request, event, identity, context, profile)
    update: GraphState = {
        "profile": profile,
        "gate": gate,
        "writes": RunWrites(user_id, "dm" if direct else "public", context.max_memory_writes),
        "messages": [ChatMessage("user", join_sections(sections), name=name)],
        "combined_prompt": request.words,  # what history keeps and recall searches with
        "identity": identity.text,
        "tool_rounds": 0,
    }
    if identity.model:
        update["model_override"] = identity.model
    if context.explain:
        update["explanation"] = _explained(
            state, context, profile, gate, request, identity, sections
        )
    return Command(update=update, goto="retrieve_memories")


def _sections(
    request: Request,
    event: InternalEventV2,
    identity: Identity,
    context: GraphContext,
    profile: Profile,
) -> list[Rendered]:
    """The composed request, with the profile's guidance in Constraints and its task line in
    Task (BitBrat's priority 2) unless ``LLM_BOT_BEHAVIORAL_GUIDANCE_ENABLED`` is off."""
    if not context.behavior.guidance:
        return request.sections(event, identity)
    task = task_instruction(profile)
    return request.sections(
        event,
        identity,
        constraints=guidance_lines(profile),
        task_lines=[task] if task else [],
    )


def _explained(
    state: GraphState,
    context: GraphContext,
    profile: Profile,
    gate: Gate,
    request: Request | None = None,
    identity: Identity | None = None,
    sections: Sequence[Rendered] = (),
) -> Record:
    """The explanation as far as this node knows it: the behaviour decision and, when the
    event goes on to the model, the sections of the system and user messages it composed
    (each by hash, with what it cites). Memory's sources and the tool calls come later."""
    step = state["inbound"].key.step
    decision = behaviour_decision_of(profile, gate, context.behavior.guidance)
    if request is None or identity is None:
        return Record(step, decision)
    named = [part.name or "written out" for part in request.personalities]
    system = [
        section("System Prompt", "config", system_prompt_section(context.system_prompt)),
        section("Assistant Identity", "personality", identity.text or None, named),
    ]
    user = [
        section(
            part.name, part.origin, part.text if part.source is None else part.source, part.refs
        )
        for part in sections
    ]
    return Record(step, decision, (*system, *user))


def behaviour_decision_of(profile: Profile, gate: Gate, guidance: bool) -> BehaviourDecision:
    """The behaviour decision as an explanation records it: the profile's reading, the gate,
    and the policy's rules that applied."""
    policy = profile.policy
    rules = [name for name in _RULES if getattr(policy, name)]
    return BehaviourDecision(
        intent=profile.intent,
        tone=profile.tone.bucket,
        risk_level=profile.risk.level,
        risk_type=profile.risk.type,
        response_mode=profile.response_mode,
        gate=gate,
        rules=tuple(rules),
        guidance=guidance,
    )


# The policy's switches, by their names in the profile (llm_bot.graph.behavior.profile.Policy),
# that an explanation lists when they are on; should_respond and should_use_tools are listed off.
_RULES = (
    "should_deescalate",
    "should_refuse",
    "requires_safe_completion",
    "requires_escalation_annotation",
)


def _stopped(state: GraphState, context: GraphContext, profile: Profile, gate: Gate) -> GraphState:
    """The end of a run the gate stopped: a SAFE_REFUSAL's canned reply, nothing else but the
    explanation of the decision."""
    update: GraphState = {"profile": profile, "gate": gate}
    if context.explain:
        update["explanation"] = _explained(state, context, profile, gate)
    if gate == "SAFE_REFUSAL":
        now = iso_timestamp(context.clock())
        update["candidate"] = refusal_candidate(state["event"], profile, now)
    return update
