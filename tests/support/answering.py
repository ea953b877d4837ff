"""One event through the graph, for tests that need no answerer of their own."""

from __future__ import annotations

from llm_bot.answer.unit import Answer, Answerer
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.builder import LlmBotGraph
from llm_bot.graph.state import GraphContext


async def answer_event(graph: LlmBotGraph, context: GraphContext, event: InternalEventV2) -> Answer:
    """``event`` answered as the worker answers it, without a deadline or memory writes."""
    return await Answerer(graph, context).answer(inbound_of(event))
