"""Graph state (data and reducers only) and the run context (dependencies and settings).

Following LangGraph's memory-agent template, state holds what a run produces, while the
model client, memory services, tools and clock travel in :class:`GraphContext`, so tests build
the same graph with the local stack and production builds it with the real one.
"""

# No `from __future__ import annotations` here: LangGraph reads the state's annotations with
# get_type_hints, which cannot resolve the reducer that `bounded_state` binds in a closure.
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Protocol, TypedDict, cast

from llm_bot.clock import utc_now
from llm_bot.events.models import CandidateV1, InternalEventV2
from llm_bot.graph.behavior import BehaviorSettings, Gate, Profile
from llm_bot.graph.behavior_annotations import ToolUse, tool_use
from llm_bot.graph.composition import PromptOptions
from llm_bot.graph.reducer import MessageLimits, reduce_messages
from llm_bot.llm.messages import ChatMessage, ModelReply, TokenUsage, ToolCall, ToolSpec
from llm_bot.memory.personalities import Personalities
from llm_bot.memory.retrieval import MemoryContext, MemoryRetriever, NoMemory
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.tools import Tool


class ChatModel(Protocol):
    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], model: str | None = None
    ) -> ModelReply: ...


class GraphState(TypedDict, total=False):
    event: InternalEventV2
    profile: Profile  # what the event's intent, tone and risk annotations say of it
    gate: Gate  # the gate applied (absent when the event sets no task)
    user_id: str
    thread_id: str
    messages: list[ChatMessage]  # reducer bound by `bounded_state`
    combined_prompt: str  # the user's words
    identity: str  # the event's personalities, for the system message
    model_override: str  # the model the event's first personality names, if any
    memory_context: MemoryContext
    pending_calls: tuple[ToolCall, ...]
    tool_rounds: int
    usage: Annotated[TokenUsage, operator.add]
    model_name: str
    llm_text: str
    candidate: CandidateV1
    writes: RunWrites


def bounded_state(limits: MessageLimits) -> type[GraphState]:
    """``GraphState`` whose ``messages`` reducer enforces ``limits``.

    The limits are settings, but a LangGraph reducer only sees (existing, new); binding them
    into the schema keeps the reducer pure and the state free of configuration.
    """

    def bounded_messages(existing: list[ChatMessage], new: list[ChatMessage]) -> list[ChatMessage]:
        return reduce_messages(existing, new, limits)

    class BoundedGraphState(GraphState):
        messages: Annotated[list[ChatMessage], bounded_messages]  # type: ignore[misc]

    return cast("type[GraphState]", BoundedGraphState)


@dataclass(frozen=True)
class GraphContext:
    """The options come from settings (``graph.assembly.context_from_settings``), which hold
    their defaults; the dependencies default to none."""

    model: ChatModel
    system_prompt: str | None
    max_tool_rounds: int
    max_tool_calls_per_turn: int
    max_memory_writes: int
    retrieval_timeout_s: float
    prompt: PromptOptions
    behavior: BehaviorSettings
    retriever: MemoryRetriever = field(default_factory=NoMemory)
    tools: Sequence[Tool] = ()
    clock: Callable[[], datetime] = utc_now
    personalities: Personalities | None = None  # None: named personalities are left out

    def tool_use(self, profile: Profile) -> ToolUse:
        """Which of our tools the profile lets the model use (all, with filtering off)."""
        return tool_use(profile, (t.spec.name for t in self.tools), self.behavior.tool_filter)

    def offered_tools(self, profile: Profile) -> list[Tool]:
        allowed = set(self.tool_use(profile).allowed)
        return [tool for tool in self.tools if tool.spec.name in allowed]
