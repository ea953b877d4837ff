"""One event answered as the worker and ``send --local`` answer it: wired from settings, through
the real model client and the local model server, with no database (no memory writes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_bot.answer.unit import Answerer
from llm_bot.events.codec import to_document
from llm_bot.events.identity import thread_id_of
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.assembly import context_from_settings, graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.tools import MemoryTool
from llm_bot.settings import Settings
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = pytest.mark.usefixtures("fresh_server")


@pytest.fixture
async def model(server: LocalModelServer) -> AsyncIterator[ModelClient]:
    client = ModelClient.from_settings(settings_for(server))
    yield client
    await client.close()


def settings_for(server: LocalModelServer, **overrides: Any) -> Settings:
    return Settings(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test", **overrides)  # type: ignore[call-arg]


def answerer_for(
    server: LocalModelServer, model: ModelClient, memory_tools: list[MemoryTool] | None = None
) -> Answerer:
    settings = settings_for(server)
    context = context_from_settings(settings, model, memory_tools=memory_tools or ())
    return Answerer(graph_from_settings(settings), context)


def asked(text: str) -> InternalEventV2:
    return prompt_event(text, user="ada", thread="lobby", egress_topic="internal.egress.v1")


async def test_an_answer_is_the_outcome_and_the_turn_it_leaves(
    server: LocalModelServer, model: ModelClient
) -> None:
    server.script_reply("Tea, always.")
    event = asked("coffee or tea?")
    before = to_document(event)
    answer = await answerer_for(server, model).answer(inbound_of(event))
    assert to_document(event) == before, "the event answered is never modified"
    assert answer.outcome == "OK"
    pair = answer.pair
    assert pair is not None
    assert (pair.thread_id, pair.user_id) == (thread_id_of(event), "ada")
    assert (pair.prompt, pair.reply) == ("coffee or tea?", "Tea, always.")
    assert pair.source_event == f"{event.correlation_id}:0:llm-bot"


async def test_an_event_without_a_prompt_leaves_no_turn(
    server: LocalModelServer, model: ModelClient
) -> None:
    event = asked("")
    event.annotations = []  # no instruction either
    answer = await answerer_for(server, model).answer(inbound_of(event))
    assert answer.outcome == "SKIP"
    assert answer.pair is None


async def test_the_event_deadline_and_the_model_timeout_have_codes_of_their_own(
    server: LocalModelServer,
) -> None:
    """Past the event's deadline no attempt can be in time (``TIMEOUT``, forwarded at once); a
    model that did not answer may answer later (``LLM_TIMEOUT``, retried first)."""
    server.latency_ms = 3000
    patient = ModelClient.from_settings(settings_for(server))
    impatient = ModelClient.from_settings(settings_for(server, LLM_BOT_MODEL_DEADLINE_MS=300))
    try:
        late = await answerer_for(server, patient).answer(inbound_of(asked("hi"), deadline_s=0.3))
        slow = await answerer_for(server, impatient).answer(inbound_of(asked("hi"), deadline_s=30))
    finally:
        await patient.close()
        await impatient.close()
    errors = [answer.event.routing.slip[0].error for answer in (late, slow)]
    assert [(e.code, e.retryable) for e in errors if e] == [
        ("TIMEOUT", False),
        ("LLM_TIMEOUT", True),
    ]
    assert late.event.errors is not None
    assert late.event.errors[-1].fatal is True
    assert (late.pair, slow.pair) == (None, None)


class BrokenTool:
    """A tool with a bug: its parameters are no JSON schema the request can carry."""

    spec = ToolSpec("broken", "A tool with a bug.", {"type": "object", "properties": {1j: {}}})

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str:
        return "never called"


async def test_an_unexpected_failure_is_a_retryable_internal_error_that_tells_nothing(
    server: LocalModelServer, model: ModelClient
) -> None:
    answer = await answerer_for(server, model, [BrokenTool()]).answer(inbound_of(asked("hi")))
    error = answer.error
    assert error is not None
    assert (error.code, error.retryable, error.message) == (
        "INTERNAL",
        True,
        "llm-bot failed unexpectedly",
    )
    assert answer.pair is None
