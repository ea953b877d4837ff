"""Node ``ingest_prompt``: what the event asks (:mod:`llm_bot.graph.composition`) becomes this
run's user message; an event that sets no task ends the run here (SKIP)."""

from __future__ import annotations

from typing import Literal

from langgraph.types import Command

from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.graph.composition import request_of
from llm_bot.graph.state import GraphState
from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.run_writes import RunWrites


async def ingest_prompt(state: GraphState) -> Command[Literal["retrieve_memories", "__end__"]]:
    event = state["event"]
    request = request_of(event)
    if request is None:
        return Command(goto="__end__")  # LangGraph's END
    user_id = user_id_of(event)
    update: GraphState = {
        "user_id": user_id,
        "writes": RunWrites(user_id),
        "thread_id": thread_id_of(event),
        "messages": [ChatMessage("user", request.user_message(event))],
        "combined_prompt": request.words,  # what history keeps and recall searches with
        "identity": request.identity,
        "tool_rounds": 0,
    }
    return Command(update=update, goto="retrieve_memories")
