"""The LangGraph graph: ingest_prompt, retrieve_memories, call_model and tools,
build_candidate."""

from llm_bot.graph.assembly import context_from_settings, graph_from_settings
from llm_bot.graph.builder import LlmBotGraph, compile_graph
from llm_bot.graph.process import ProcessResult, process_event, record_failure
from llm_bot.graph.state import GraphContext

__all__ = [
    "GraphContext",
    "LlmBotGraph",
    "ProcessResult",
    "compile_graph",
    "context_from_settings",
    "graph_from_settings",
    "process_event",
    "record_failure",
]
