"""Node ``call_model``: one model turn, tools offered within the bound; on to the tools when
the model called any, else to ``build_candidate``.

The context sent is the system prompt (with the event's personality), then the memory
context, then this run's messages (see :mod:`llm_bot.graph.prompt.composition`).
Once ``max_tool_rounds`` rounds of tool calls have run, the model is called without tools, so
it has to answer in text: a model that keeps calling tools still ends with a reply (with the
default 4 rounds, at most BitBrat's 5 model steps). The tools offered are the event's offer,
made at its first call (:mod:`llm_bot.graph.offering`: the memory tools, the built-ins and the
gateway's allowed tools that pass the user's roles, ``metadata.scope`` and the behaviour
profile, which allows none for medium or high risk, a dangerous risk type, spam or an agitated
critique, and only the status tools for a meta question). Of one turn's calls, the first
``max_tool_calls_per_turn`` run; the rest are dropped from the turn (a steered model may emit
hundreds), so every call the model sees answered is one that ran.
"""

from __future__ import annotations

import logging
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from llm_bot.graph.prompt.composition import system_message
from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.llm.messages import ChatMessage

logger = logging.getLogger(__name__)


async def call_model(
    state: GraphState, runtime: Runtime[GraphContext]
) -> Command[Literal["tools", "build_candidate"]]:
    context = runtime.context
    system_text = system_message(context.system_prompt, state.get("identity", ""))
    system = [ChatMessage("system", system_text)] if system_text else []
    memory = list(state["memory_context"].messages) if "memory_context" in state else []
    offer = state["offer"] if "offer" in state else context.offer(state["event"], state["profile"])
    tools_allowed = state.get("tool_rounds", 0) < context.max_tool_rounds
    specs = offer.specs if tools_allowed else []
    messages = [*system, *memory, *state["messages"]]
    # An event's personality may name its model; None keeps the configured one.
    reply = await context.model.complete(messages, specs, model=state.get("model_override"))
    calls = reply.tool_calls if specs else ()  # calls to tools we did not offer are ignored
    if len(calls) > context.max_tool_calls_per_turn:
        logger.warning(
            "tool calls beyond the limit dropped",
            extra={"calls": len(calls), "limit": context.max_tool_calls_per_turn},
        )
        calls = calls[: context.max_tool_calls_per_turn]
    update: GraphState = {
        "offer": offer,
        "messages": [ChatMessage("assistant", reply.text, calls)],
        "pending_calls": calls,
        "usage": reply.usage,
        "model_name": reply.model,
        "llm_text": reply.text,
    }
    return Command(update=update, goto="tools" if calls else "build_candidate")
