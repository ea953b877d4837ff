"""Node ``ingest_prompt``: the event's prompt annotations become this run's user messages; an
event without any ends the run here."""

from __future__ import annotations

from typing import Literal

from langgraph.types import Command

from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.graph.state import GraphState
from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.run_writes import RunWrites


def prompt_texts(event: InternalEventV2) -> list[str]:
    """Texts of ``kind == "prompt"`` annotations (``value``, else ``payload.text``), ordered
    by ``createdAt`` then ``id``; blank ones are ignored."""
    prompts = sorted(
        (a for a in event.annotations or () if a.kind == "prompt"),
        key=lambda a: (a.created_at, a.id),
    )
    texts = (_text_of(a) for a in prompts)
    return [text for text in texts if text and text.strip()]


def _text_of(annotation: AnnotationV1) -> str | None:
    if annotation.value:
        return annotation.value
    text = (annotation.payload or {}).get("text")
    return text if isinstance(text, str) else None


async def ingest_prompt(state: GraphState) -> Command[Literal["retrieve_memories", "__end__"]]:
    event = state["event"]
    texts = prompt_texts(event)
    if not texts:
        return Command(goto="__end__")  # LangGraph's END
    user_id = user_id_of(event)
    update: GraphState = {
        "user_id": user_id,
        "writes": RunWrites(user_id),
        "thread_id": thread_id_of(event),
        "messages": [ChatMessage("user", text) for text in texts],
        "combined_prompt": "\n".join(texts),
        "tool_rounds": 0,
    }
    return Command(update=update, goto="retrieve_memories")
