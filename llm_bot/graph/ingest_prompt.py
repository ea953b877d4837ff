"""Node ``ingest_prompt``: the event's prompt annotations become this run's user messages."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END

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


async def ingest_prompt(state: GraphState) -> dict[str, Any]:
    event = state["event"]
    texts = prompt_texts(event)
    user_id = user_id_of(event)
    return {
        "user_id": user_id,
        "writes": RunWrites(user_id),
        "thread_id": thread_id_of(event),
        "messages": [ChatMessage("user", text) for text in texts],
        "combined_prompt": "\n".join(texts),
        "tool_rounds": 0,
    }


async def after_ingest(state: GraphState) -> str:
    """Async although it awaits nothing: LangGraph runs a plain function in a thread pool."""
    return "retrieve_memories" if state.get("combined_prompt") else END
