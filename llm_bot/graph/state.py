"""Graph state (data and reducers only) and the run context (dependencies and settings).

Following LangGraph's memory-agent template, state holds what a run produces, while the
model client, memory services, memory and platform tools and the clock travel in
:class:`GraphContext`, so tests build the same graph with the local stack and production builds
it with the real one.
"""

# No `from __future__ import annotations` here: LangGraph reads the state's annotations with
# get_type_hints, which cannot resolve the reducer that `bounded_state` binds in a closure.
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Protocol, TypedDict, cast

from llm_bot.clock import utc_now
from llm_bot.db.personalities import Personalities
from llm_bot.events.inbound import Inbound
from llm_bot.events.models import CandidateV1, InternalEventV2
from llm_bot.explanation.record import Record
from llm_bot.graph.behavior.profile import BehaviorSettings, Gate, Profile
from llm_bot.graph.offering import Offer, make_offer
from llm_bot.graph.prompt.composition import PromptOptions
from llm_bot.graph.reducer import MessageLimits, reduce_messages
from llm_bot.graph.tool_round import TimeLimit, ToolRecord
from llm_bot.llm.messages import ChatMessage, ModelReply, TokenUsage, ToolCall, ToolSpec
from llm_bot.memory.retrieval import MemoryContext, MemoryRetriever, NoMemory
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.tools import MemoryTool
from llm_bot.platform_tools.calls import NoLedger, ToolLedger, ToolOutcome
from llm_bot.platform_tools.platform import PlatformTool


class ChatModel(Protocol):
    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], model: str | None = None
    ) -> ModelReply: ...


class GraphState(TypedDict, total=False):
    event: InternalEventV2  # the run's copy of the event
    inbound: Inbound  # the event as received, with its user, thread and key
    profile: Profile  # what the event's intent, tone and risk annotations say of it
    gate: Gate  # the gate applied (absent when the event sets no task)
    messages: list[ChatMessage]  # reducer bound by `bounded_state`
    combined_prompt: str  # the user's words
    identity: str  # the event's personalities, for the system message
    model_override: str  # the model the event's first personality names, if any
    memory_context: MemoryContext
    offer: Offer  # the tools of this event, made at its first model call
    pending_calls: tuple[ToolCall, ...]
    tool_rounds: int
    platform_calls: int  # platform-tool calls so far: the next one's index in its CallKey
    tool_records: Annotated[list[ToolRecord], operator.add]
    # The platform-tool calls the run sent, by graph.tool_round.call_identity: a repeat is answered
    # from here.
    tool_answers: Annotated[dict[str, ToolOutcome], operator.or_]
    usage: Annotated[TokenUsage, operator.add]
    model_name: str
    llm_text: str
    candidate: CandidateV1
    writes: RunWrites
    # What reached the model and why (llm_bot.explanation), assembled with the prompt; absent
    # when LLM_BOT_EXPLANATIONS is off.
    explanation: Record


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
    tool_timeout_s: float  # LLM_BOT_TOOL_TIMEOUT_MS
    tool_result_max_chars: int  # LLM_BOT_TOOL_RESULT_MAX_CHARS
    retriever: MemoryRetriever = field(default_factory=NoMemory)
    memory_tools: Sequence[MemoryTool] = ()
    # The platform tools as they are now (llm_bot.platform_tools.catalog.ToolCatalog.tools):
    # read once per event. None: the run offers memory tools alone.
    platform_tools: Callable[[], Sequence[PlatformTool]] | None = None
    ledger: ToolLedger = field(default_factory=NoLedger)
    clock: Callable[[], datetime] = utc_now
    personalities: Personalities | None = None  # None: named personalities are left out
    deadline: float | None = None  # the event's deadline, in the event loop's time
    explain: bool = True  # LLM_BOT_EXPLANATIONS: assemble each answer's explanation

    def offer(self, event: InternalEventV2, profile: Profile) -> Offer:
        """The event's offer (:mod:`llm_bot.graph.offering`)."""
        platform = self.platform_tools() if self.platform_tools is not None else ()
        return make_offer(event, profile, self.memory_tools, platform, self.behavior.tool_filter)

    def tool_timeout(self, now: float) -> TimeLimit:
        """One platform-tool call's limit at loop time ``now``: ``LLM_BOT_TOOL_TIMEOUT_MS``, and
        at most half the time left before the event's deadline, so the model still has time
        to answer once a tool that hangs has been given up (0: no time left, not sent)."""
        if self.deadline is None:
            return TimeLimit(self.tool_timeout_s, True)
        seconds = max(0.0, min(self.tool_timeout_s, (self.deadline - now) / 2))
        return TimeLimit(seconds, seconds >= self.tool_timeout_s)
