"""The graph's shape, uncompiled, so tests and the worker compile it with their own backends.

    ingest_prompt ─(no prompt)─► END
          │
    retrieve_memories ─► call_model ⇄ tools
                                    │
                             build_candidate ─► END

No checkpointer: thread history is ours, one write per turn (docs/architecture.md). The two nodes
that choose the way on (``ingest_prompt``, ``call_model``) say so in the ``Command`` they return
(LangGraph's routing from inside a node) rather than through conditional edges, whose routers
LangGraph runs as runnables of their own, with callbacks: ~0.35 ms of CPU per event.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from llm_bot.graph.nodes.build_candidate import build_candidate
from llm_bot.graph.nodes.call_model import call_model
from llm_bot.graph.nodes.ingest_prompt import ingest_prompt
from llm_bot.graph.nodes.retrieve_memories import retrieve_memories
from llm_bot.graph.nodes.run_tools import run_tools
from llm_bot.graph.reducer import MessageLimits
from llm_bot.graph.state import GraphContext, GraphState, bounded_state
from llm_bot.telemetry.traces import traced_stage

LlmBotGraph = CompiledStateGraph[GraphState, GraphContext, Any, Any]


def build_graph(limits: MessageLimits) -> StateGraph[GraphState, GraphContext, Any, Any]:
    graph = StateGraph(bounded_state(limits), context_schema=GraphContext)
    graph.add_node("ingest_prompt", traced_stage("ingest_prompt")(ingest_prompt))
    graph.add_node(
        "retrieve_memories",
        traced_stage("retrieve_memories")(retrieve_memories),
    )
    graph.add_node("call_model", traced_stage("call_model")(call_model))
    graph.add_node("tools", traced_stage("tools")(run_tools))
    graph.add_node("build_candidate", traced_stage("build_candidate")(build_candidate))
    graph.add_edge(START, "ingest_prompt")
    graph.add_edge("retrieve_memories", "call_model")
    graph.add_edge("tools", "call_model")
    graph.add_edge("build_candidate", END)
    return graph


def compile_graph(limits: MessageLimits) -> LlmBotGraph:
    return build_graph(limits).compile()
