"""Answering one event and committing what it leaves, as the worker does, for tests of what the
model sees and what its tool calls leave behind."""

from __future__ import annotations

from llm_bot.answer.unit import Answer, Answerer
from llm_bot.clock import utc_now
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.assembly import graph_from_settings
from llm_bot.graph.state import GraphContext
from llm_bot.llm.client import ModelClient
from llm_bot.memory.commit import MemoryCommit
from llm_bot.memory.context import PostgresMemoryRetriever
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.tools import DeleteMemoryTool, UpsertMemoryTool
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...from_settings import context_limits, graph_context

GRAPH = graph_from_settings(load_settings())


def context_for(store: MemoryStore, model: ModelClient) -> GraphContext:
    limits = context_limits(threshold=0.2)
    return graph_context(
        model,
        retriever=PostgresMemoryRetriever(store, limits, "llm-bot", utc_now),
        memory_tools=[UpsertMemoryTool(store, 2048, max_memories=0), DeleteMemoryTool(store)],
        system_prompt="system",
    )


def said(user: str, thread: str, text: str) -> InternalEventV2:
    return prompt_event(text, user=user, thread=thread, egress_topic="internal.egress.v1")


def answerer_for(store: MemoryStore, model: ModelClient) -> Answerer:
    commit = MemoryCommit.from_settings(store, load_settings())
    return Answerer(GRAPH, context_for(store, model), commit)


async def commit(answerer: Answerer, answer: Answer) -> None:
    assert answer.pair is not None
    await answerer.commit(answer)


def first_request(server: LocalModelServer) -> str:
    """The text of every message of the first request, as the model reads it."""
    return "\n".join(m["content"] or "" for m in server.chat_requests()[0]["messages"])


def tool_results(server: LocalModelServer) -> list[str]:
    messages = server.chat_requests()[-1]["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]
