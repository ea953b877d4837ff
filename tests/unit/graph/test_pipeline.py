"""The graph end to end through the local OpenAI-compatible server and the real client."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest

from llm_bot.clock import iso_timestamp
from llm_bot.events.codec import from_document, to_document
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.builder import LlmBotGraph, compile_graph
from llm_bot.graph.reducer import MessageLimits
from llm_bot.graph.state import GraphContext
from llm_bot.llm.client import ModelClient
from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.retrieval import MemoryContext
from llm_bot.memory.run_writes import RunWrites
from llm_bot_tools.local.openai_server import LocalModelServer

from ...from_settings import graph_context
from ...support.answering import answer_event

CONTRACTS = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"
API_KEY = "sk-test-never-leak-0123456789"
REQUESTING_USER = (
    "## [Requesting User]\n- Handle: slackuser\n- User ID: U987654321\n- Display Name: slackuser"
    "\n\n## [Contexts]\n- None provided.\n\n## [Constraints]"
    # The behaviour profile of an event without intent, tone and risk annotations.
    "\n- (2) Detected user intent: question.\n- (2) Detected user tone: neutral and steady arousal."
    "\n- (2) Detected safety risk: none."
)
SYSTEM = (
    "## [System Prompt]\n- Rules\n- You are terse.\n- Sources: config"
    "\n\n## [Assistant Identity]\n- None provided."
)


pytestmark = pytest.mark.usefixtures("fresh_server")


def model_client(
    server: LocalModelServer, *, mode: str = "chat", deadline_s: float = 5.0, **options: Any
) -> ModelClient:
    client = openai.AsyncOpenAI(
        base_url=server.base_url,
        api_key=API_KEY,
        max_retries=0,
        timeout=options.pop("timeout", 5.0),
    )
    return ModelClient(client, "local-test-model", mode, deadline_s, **options)


def context(model: ModelClient, **overrides: Any) -> GraphContext:
    return graph_context(model, **{"system_prompt": "You are terse.", **overrides})


def graph(max_messages: int = 8, max_chars: int = 8000) -> LlmBotGraph:
    return compile_graph(MessageLimits(max_messages=max_messages, max_chars=max_chars))


def event(*prompts: str, shuffled: bool = False) -> InternalEventV2:
    document = json.loads((CONTRACTS / "chat-message.json").read_text())
    annotations = [
        {
            "id": f"p{i}",
            "kind": "prompt",
            "source": "router",
            "createdAt": f"2026-01-01T00:00:0{i}Z",
            "value": text,
        }
        for i, text in enumerate(prompts)
    ]
    document["annotations"] = list(reversed(annotations)) if shuffled else annotations
    document["routing"]["slip"] = [{"id": "llm-bot", "status": "PENDING", "attempt": 1}]
    return from_document(document)


class LookupTool:
    spec = ToolSpec("lookup", "Look something up.", {"type": "object", "properties": {}})

    def __init__(self) -> None:
        self.users: list[str] = []

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str:
        self.users.append(run.user_id)
        if arguments.get("explode"):
            raise RuntimeError("lookup backend down")
        return "found it"


async def test_prompts_reach_the_model_in_order_and_the_candidate_is_the_reply(
    server: LocalModelServer,
) -> None:
    server.script_reply("Here you go.")
    result = await answer_event(
        graph(), context(model_client(server)), event("one", "two", "three", shuffled=True)
    )
    sent = server.chat_requests()[0]["messages"]
    assert sent == [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": REQUESTING_USER
            + "\n\n## [Task]\n- (3) one\n\ntwo\n\nthree"
            + "\n\n## [Input]\nHello from the chatbot in a channel!",
            "name": "slack_U987654321",  # a channel's turns name their speaker
        },
    ]
    chat = next(r for r in server.requests if r.path.endswith("/chat/completions"))
    assert chat.headers["authorization"] == f"Bearer {API_KEY}"
    assert chat.body["model"] == "local-test-model"
    assert result.outcome == "OK"
    assert result.candidate is not None
    assert result.candidate.text == "Here you go."
    assert result.event.candidates == [result.candidate]
    assert (result.candidate.id, result.candidate.priority) == ("cand-test-correlation-789", 10)
    assert result.candidate.reason == "model:local-test-model"
    assert result.candidate.metadata is not None
    assert result.candidate.metadata["usage"]["inputTokens"] > 0
    assert result.event.routing.slip[0].status == "OK"


async def test_without_message_text_the_task_is_the_input(server: LocalModelServer) -> None:
    """As on the platform: an event with no text of its own answers its instruction."""
    silent = event("say hello")
    assert silent.message is not None
    silent.message.text = None
    await answer_event(graph(), context(model_client(server)), silent)
    user = server.chat_requests()[0]["messages"][-1]["content"]
    assert user.endswith("## [Task]\n- (3) say hello\n\n## [Input]\nsay hello")


async def test_the_input_event_is_left_untouched(server: LocalModelServer) -> None:
    original = event("hello")
    before = to_document(original)
    await answer_event(graph(), context(model_client(server)), original)
    assert to_document(original) == before


async def test_no_prompt_skips_without_calling_the_model(server: LocalModelServer) -> None:
    result = await answer_event(graph(), context(model_client(server)), event())
    assert result.outcome == "SKIP"
    assert result.candidate is None
    assert not result.event.candidates
    step = result.event.routing.slip[0]
    assert step.status == "SKIP"
    assert step.error is not None
    assert step.error.code == "NO_PROMPT"
    assert server.chat_requests() == []


async def test_rate_limit_then_success_is_ok_after_a_retry(server: LocalModelServer) -> None:
    server.fail_next(1, status=429)
    result = await answer_event(graph(), context(model_client(server)), event("hi"))
    assert result.outcome == "OK"
    assert len(server.chat_requests()) == 2


async def test_model_down_past_the_retries_is_a_retryable_error(server: LocalModelServer) -> None:
    server.fail_next(1000, status=500)
    # Retries stop before a backoff that would end past the deadline: 2 s leaves room for a
    # second attempt even when the first answer is slow on a loaded machine.
    result = await answer_event(graph(), context(model_client(server, deadline_s=2.0)), event("hi"))
    assert result.outcome == "ERROR"
    assert len(server.chat_requests()) >= 2, "no retry happened"
    step = result.event.routing.slip[0]
    assert step.status == "ERROR"
    assert step.error is not None
    assert (step.error.code, step.error.retryable) == ("LLM_UNAVAILABLE", True)
    assert result.event.errors is not None
    entry = result.event.errors[-1]
    assert (entry.source, entry.fatal) == ("llm-bot", False)
    assert "LLM_UNAVAILABLE" in entry.message
    published = json.dumps(to_document(result.event))
    assert API_KEY not in published
    assert "Traceback" not in published


async def test_a_hanging_model_is_a_model_timeout(server: LocalModelServer) -> None:
    """``LLM_TIMEOUT``, retryable: the event's own deadline is another code (``TIMEOUT``)."""
    server.hang_next(1000, seconds=5)
    client = model_client(server, deadline_s=0.5, timeout=0.2)
    result = await answer_event(graph(), context(client), event("hi"))
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("LLM_TIMEOUT", True)


async def test_a_rejected_request_is_permanent_and_not_retried(server: LocalModelServer) -> None:
    server.fail_next(1, status=400)
    result = await answer_event(graph(), context(model_client(server)), event("hi"))
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("LLM_REQUEST_INVALID", False)
    assert len(server.chat_requests()) == 1


def tool_turn(call: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"message": message, "finish_reason": "tool_calls"}]}


@pytest.mark.parametrize("mode", ["chat", "responses"])
async def test_a_tool_call_named_by_no_text_is_an_invalid_request_asked_once(
    server: LocalModelServer, mode: str
) -> None:
    """Not INTERNAL, which a redelivery would ask the model again for."""
    if mode == "chat":
        server.script_body(tool_turn({"id": "c1", "function": {"name": {"a": 1}}}))
    else:
        call = {"type": "function_call", "call_id": "c1", "name": {"a": 1}, "arguments": "{}"}
        server.script_body({"id": "r", "model": "m", "output": [call]})
    tool = LookupTool()
    result = await answer_event(
        graph(), context(model_client(server, mode=mode), memory_tools=[tool]), event("hi")
    )
    assert result.error is not None
    assert (result.error.code, result.error.retryable) == ("LLM_REQUEST_INVALID", False)
    assert (len(server.chat_requests()), tool.users) == (1, [])


async def test_arguments_nested_too_deeply_are_answered_to_the_model(
    server: LocalModelServer,
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    server.script_body(tool_turn({"id": "c1", "function": {"name": "lookup", "arguments": deep}}))
    server.script_reply("done")
    tool = LookupTool()
    result = await answer_event(
        graph(), context(model_client(server), memory_tools=[tool]), event("hi")
    )
    assert result.candidate is not None
    assert result.candidate.text == "done"
    [answered] = [m for m in server.chat_requests()[1]["messages"] if m["role"] == "tool"]
    assert answered["content"] == "error: arguments are nested too deeply"
    assert tool.users == []


async def test_a_model_that_keeps_calling_tools_stops_after_the_bound(
    server: LocalModelServer,
) -> None:
    server.always_call_tool("lookup", {"q": "x"})
    tool = LookupTool()
    result = await answer_event(
        graph(), context(model_client(server), memory_tools=[tool], max_tool_rounds=3), event("hi")
    )
    requests = server.chat_requests()
    assert len(requests) == 4
    assert all("tools" in r for r in requests[:3])
    assert "tools" not in requests[3]
    assert tool.users == ["slack:U987654321"] * 3
    assert result.outcome == "OK"
    assert result.candidate is not None
    assert result.candidate.metadata is not None
    assert result.candidate.metadata["toolRounds"] == 3


async def test_tool_results_and_failures_go_back_to_the_model(server: LocalModelServer) -> None:
    server.script_tool_calls([("lookup", {"explode": True}), ("nosuch", {})])
    server.script_reply("recovered")
    result = await answer_event(
        graph(), context(model_client(server), memory_tools=[LookupTool()]), event("hi")
    )
    tool_messages = [m for m in server.chat_requests()[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [
        "error: lookup failed: RuntimeError: lookup backend down",
        "error: no tool named 'nosuch'; available: adventure_narrate, basic_get_current_time,"
        " internal_get_bot_status, internal_list_available_tools, lookup",
    ]
    assert result.candidate is not None
    assert result.candidate.text == "recovered"


async def test_responses_api_mode(server: LocalModelServer) -> None:
    server.script_reply("from responses")
    client = model_client(server, mode="responses")
    result = await answer_event(graph(), context(client), event("first", "second"))
    request = server.chat_requests()[0]
    assert request["instructions"] == SYSTEM
    assert request["input"] == [
        {
            "role": "user",
            "content": REQUESTING_USER + "\n\n## [Task]\n- (3) first\n\nsecond"
            "\n\n## [Input]\nHello from the chatbot in a channel!",
        }
    ]
    assert result.candidate is not None
    assert result.candidate.text == "from responses"


class BrokenMemory:
    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext:
        raise ConnectionError("database is down")


class SlowMemory:
    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext:
        await asyncio.Event().wait()  # never answers
        raise AssertionError


@pytest.mark.parametrize("memory", [BrokenMemory(), SlowMemory()], ids=["broken", "slow"])
async def test_failing_memory_degrades_to_no_memories(
    server: LocalModelServer, memory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = context(model_client(server), retriever=memory, retrieval_timeout_s=0.2)
    result = await answer_event(graph(), ctx, event("hi"))
    assert result.outcome == "OK"
    assert result.candidate is not None
    assert result.candidate.metadata is not None
    assert result.candidate.metadata["memory"] == {"retrievalFailed": 1}
    assert any(r.message.startswith("memory retrieval failed") for r in caplog.records)


class OneMemory:
    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext:
        from llm_bot.llm.messages import ChatMessage

        return MemoryContext(
            (ChatMessage("system", f"Memory of {user_id}: likes tea"),), {"memories": 1}
        )


class AskedAt:
    """Remembers when each question was asked, as the graph says."""

    def __init__(self) -> None:
        self.asked: list[datetime | None] = []

    async def retrieve(
        self,
        user_id: str,
        thread_id: str,
        query: str,
        *,
        private: bool,
        asked_at: datetime | None = None,
    ) -> MemoryContext:
        self.asked.append(asked_at)
        return MemoryContext()


async def test_a_question_waiting_on_the_bus_is_asked_when_it_came_in_not_when_answered(
    server: LocalModelServer,
) -> None:
    """A backlog after an outage: the event came in two days before it is answered, and its
    "yesterday" is the day before it came in (recall counts relative dates from it)."""
    memory = AskedAt()
    delayed = event("hi")
    came_in = datetime.now(UTC) - timedelta(days=2)
    delayed.ingress.ingress_at = iso_timestamp(came_in)
    await answer_event(graph(), context(model_client(server), retriever=memory), delayed)
    [asked] = memory.asked
    assert asked is not None
    assert abs((asked - came_in).total_seconds()) < 0.001


async def test_the_memory_context_sits_between_system_prompt_and_the_run(
    server: LocalModelServer,
) -> None:
    await answer_event(graph(), context(model_client(server), retriever=OneMemory()), event("hi"))
    sent = server.chat_requests()[0]["messages"]
    assert [m["content"] for m in sent][:2] == [
        SYSTEM,
        "Memory of slack:U987654321: likes tea",
    ]
    assert sent[2]["content"].endswith("## [Input]\nHello from the chatbot in a channel!")
    assert len(sent) == 3
