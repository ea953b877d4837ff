"""Build the compiled graph and its run context from settings, in one place.

The worker, ``llm-bot send --local`` and the benchmarks all run the same graph with the same
dependencies; only the memory services and memory tools they pass in differ. The platform
tools are the built-ins and, when the worker has one, the tool-gateway's allowed tools
(``LLM_BOT_TOOLS_ALLOW``); without a gateway (``send --local``, the dev stack) the built-ins
alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm_bot.db.personalities import Personalities
from llm_bot.graph.behavior.profile import BehaviorSettings
from llm_bot.graph.builder import LlmBotGraph, compile_graph
from llm_bot.graph.prompt.composition import prompt_options
from llm_bot.graph.prompt.system_prompt import resolve_system_prompt
from llm_bot.graph.reducer import MessageLimits
from llm_bot.graph.state import ChatModel, GraphContext
from llm_bot.memory.retrieval import MemoryRetriever, NoMemory
from llm_bot.memory.tools import MemoryTool
from llm_bot.platform_tools.calls import NoLedger, ToolLedger
from llm_bot.platform_tools.catalog import ToolCatalog, allowlist
from llm_bot.platform_tools.client import McpClient
from llm_bot.settings import Settings


def graph_from_settings(settings: Settings) -> LlmBotGraph:
    return compile_graph(MessageLimits(settings.memory_max_messages, settings.memory_max_chars))


def context_from_settings(
    settings: Settings,
    model: ChatModel,
    retriever: MemoryRetriever | None = None,
    memory_tools: Sequence[MemoryTool] = (),
    personalities: Personalities | None = None,
    gateway: McpClient | None = None,
    ledger: ToolLedger | None = None,
) -> GraphContext:
    catalog = ToolCatalog(gateway, allowlist(settings.tools_allow))
    return GraphContext(
        model=model,
        retriever=retriever or NoMemory(),
        memory_tools=memory_tools,
        platform_tools=catalog.tools,
        ledger=ledger or NoLedger(),
        tool_timeout_s=settings.tool_timeout_ms / 1000,
        tool_result_max_chars=settings.tool_result_max_chars,
        system_prompt=resolve_system_prompt(settings),
        max_tool_rounds=settings.max_tool_rounds,
        max_tool_calls_per_turn=settings.max_tool_calls_per_turn,
        max_memory_writes=settings.max_memory_writes_per_event,
        retrieval_timeout_s=settings.retrieval_timeout_ms / 1000,
        personalities=personalities,
        prompt=prompt_options(settings),
        behavior=BehaviorSettings.from_settings(settings),
        explain=settings.explanations,
    )
