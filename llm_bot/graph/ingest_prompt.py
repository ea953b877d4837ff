"""Node ``ingest_prompt``: what the event asks (:mod:`llm_bot.graph.composition`) becomes this
run's user message, named after its speaker in a shared channel as every user turn there is
(:mod:`llm_bot.memory.context`); an event that sets no task ends the run here (SKIP).
Personalities named by the event are looked up here, once per run
(``GraphContext.personalities``)."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from llm_bot.events.identity import is_direct, thread_id_of, user_id_of
from llm_bot.graph.composition import request_of, resolve_identity
from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.context import speaker_name
from llm_bot.memory.run_writes import RunWrites


async def ingest_prompt(
    state: GraphState, runtime: Runtime[GraphContext]
) -> Command[Literal["retrieve_memories", "__end__"]]:
    event = state["event"]
    request = request_of(event, runtime.context.prompt)
    if request is None:
        return Command(goto="__end__")  # LangGraph's END
    context = runtime.context
    identity = await resolve_identity(
        request.personalities, context.personalities, context.retrieval_timeout_s
    )
    user_id = user_id_of(event)
    direct = is_direct(event)
    name = None if direct else speaker_name(user_id)
    update: GraphState = {
        "user_id": user_id,
        "writes": RunWrites(user_id, "dm" if direct else "public", context.max_memory_writes),
        "thread_id": thread_id_of(event),
        "messages": [ChatMessage("user", request.user_message(event, identity), name=name)],
        "combined_prompt": request.words,  # what history keeps and recall searches with
        "identity": identity.text,
        "tool_rounds": 0,
    }
    if identity.model:
        update["model_override"] = identity.model
    return Command(update=update, goto="retrieve_memories")
