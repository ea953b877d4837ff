"""The gateway's tools offered to the model and called through the graph: a real SDK server
over HTTP + SSE with the gateway's token check, the local model server scripting the model's
calls, and the event answered as the worker answers it (:class:`Answerer`, with a deadline)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_bot.answer.unit import Answer, Answerer
from llm_bot.events.codec import decode, encode
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.graph.assembly import context_from_settings, graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.platform_tools.calls import CallKey, ToolOutcome
from llm_bot.platform_tools.client import McpClient, gateway_client
from llm_bot.platform_tools.gateway import IDEMPOTENCY_KEY, listed
from llm_bot.platform_tools.platform import Caller, ToolRequest
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.tool_output import shown
from .conftest import ToolServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_chat")]

WAIT_S = 10.0
EVERY_TOOL = "mcp:*"


@pytest.fixture
def fresh_chat(chat_server: LocalModelServer) -> None:
    chat_server.reset()


async def connected_gateway(server: ToolServer) -> McpClient:
    settings = load_settings(MCP_GATEWAY_URL=server.url, MCP_AUTH_TOKEN="gateway-token")
    client = gateway_client(settings)
    assert client is not None
    client.start()
    await client.wait_until(lambda c: c.connected, WAIT_S)
    return client


@pytest.fixture
async def gateway(sse_server: ToolServer) -> AsyncIterator[McpClient]:
    client = await connected_gateway(sse_server)
    yield client
    await client.aclose()


def answerer(model: ModelClient, gateway: McpClient | None, **settings: Any) -> Answerer:
    loaded = load_settings(**{"LLM_BOT_TOOLS_ALLOW": EVERY_TOOL, **settings})
    context = context_from_settings(loaded, model, gateway=gateway)
    return Answerer(graph_from_settings(loaded), context)


def event(text: str = "do it", *, roles: list[str] | None = None) -> InternalEventV2:
    built = prompt_event(text, user="ada", thread="room", egress_topic="internal.egress.v1")
    assert built.identity.user is not None
    built.identity.user.roles = roles
    return built


def analysed(built: InternalEventV2, **labels: str) -> InternalEventV2:
    """``built`` with the query analyser's annotations (kind ``intent``, ``risk``, ...)."""
    extra = [AnnotationV1(id=f"a-{kind}", kind=kind, label=label) for kind, label in labels.items()]
    built.annotations = [*(built.annotations or []), *extra]
    return built


def offered(server: LocalModelServer, request: int = 0) -> set[str]:
    tools = server.chat_requests()[request].get("tools") or []
    return {tool["function"]["name"] for tool in tools}


def tool_messages(server: LocalModelServer) -> list[str]:
    return [
        shown(str(message["content"]))
        for message in server.chat_requests()[-1]["messages"]
        if message["role"] == "tool"
    ]


def strategy(answer: Answer) -> dict[str, Any]:
    annotations = answer.event.annotations or []
    found = [a for a in annotations if a.kind == "response-strategy"]
    assert len(found) == 1
    return dict(found[0].payload or {})


async def test_a_call_reaches_the_server_with_the_user_and_its_result_reaches_the_model(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    chat_server.script_tool_call("mcp_echo", {"text": "hello"})
    chat_server.script_reply("done")
    answer = await answerer(model, gateway).answer(inbound_of(event(roles=["vip"]), deadline_s=30))

    assert answer.outcome == "OK"
    assert "mcp_echo" in offered(chat_server)
    assert tool_messages(chat_server) == ["echo: hello"]
    [call] = sse_server.calls
    assert call.arguments == {"text": "hello"}
    assert call.meta is not None
    assert call.meta["userRoles"] == ["vip"]
    assert call.meta["userId"] == "ada"
    correlation = answer.event.correlation_id
    assert call.meta[IDEMPOTENCY_KEY] == f"{correlation}:0:llm-bot:0"
    assert call.agent_name == "llm-bot"
    assert answer.candidate is not None
    metadata = answer.candidate.metadata or {}
    assert metadata["tools"] == [{"tool": "mcp:echo", "outcome": "ok"}]
    assert not answer.event.errors


async def test_calls_are_numbered_across_rounds(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    chat_server.script_tool_calls([("mcp_echo", {"text": "a"}), ("basic_get_current_time", {})])
    chat_server.script_tool_call("mcp_echo", {"text": "b"})
    chat_server.script_reply("done")
    answer = await answerer(model, gateway).answer(inbound_of(event(), deadline_s=30))

    correlation = answer.event.correlation_id
    keys = [
        (call.arguments["text"], (call.meta or {})[IDEMPOTENCY_KEY]) for call in sse_server.calls
    ]
    # The built-in between them took index 1.
    assert keys == [("a", f"{correlation}:0:llm-bot:0"), ("b", f"{correlation}:0:llm-bot:2")]


async def test_a_tool_the_users_roles_do_not_allow_is_neither_offered_nor_executed(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    chat_server.script_tool_call("mcp_ban_user", {"user": "bob"})
    chat_server.script_reply("done")
    answer = await answerer(model, gateway).answer(inbound_of(event(roles=["vip"]), deadline_s=30))

    assert "mcp_ban_user" not in offered(chat_server)
    assert "mcp_echo" in offered(chat_server)
    assert tool_messages(chat_server)[0].startswith("error: no tool named 'mcp_ban_user'")
    assert sse_server.calls == []
    assert answer.outcome == "OK"


async def test_a_moderator_is_offered_the_tool_and_it_runs(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    chat_server.script_tool_call("mcp_ban_user", {"user": "bob"})
    chat_server.script_reply("done")
    await answerer(model, gateway).answer(inbound_of(event(roles=["moderator"]), deadline_s=30))

    assert tool_messages(chat_server) == ["banned bob"]
    assert [call.tool for call in sse_server.calls] == ["ban_user"]


async def test_the_allowlist_hides_a_gateway_tool_and_keeps_the_builtins(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    chat_server.script_tool_call("mcp_fail", {})
    chat_server.script_reply("done")
    tools = answerer(model, gateway, LLM_BOT_TOOLS_ALLOW="mcp:echo, mcp:ha*")
    await tools.answer(inbound_of(event(roles=["moderator"]), deadline_s=30))

    assert offered(chat_server) == {
        "mcp_echo",
        "mcp_hang",
        "basic_get_current_time",
        "internal_get_bot_status",
        "internal_list_available_tools",
        "adventure_narrate",
    }
    assert sse_server.calls == []


async def test_the_default_allowlist_offers_the_platforms_tools_that_act_for_the_requester(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient
) -> None:
    context = context_from_settings(load_settings(), model, gateway=gateway)
    await Answerer(graph_from_settings(load_settings()), context).answer(
        inbound_of(event(), deadline_s=30)
    )

    # Not get_state (any key), nor the test's own tools.
    assert {name for name in offered(chat_server) if name.startswith("mcp_")} == {
        "mcp_start_story",
        "mcp_get_state_prefix",
        "mcp_agent_sendProgressUpdate",
    }


async def test_a_failing_tool_is_an_error_to_the_model_and_on_the_event_which_completes(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient
) -> None:
    chat_server.script_tool_call("mcp_fail", {})
    chat_server.script_reply("sorry, that failed")
    answer = await answerer(model, gateway).answer(inbound_of(event(), deadline_s=30))

    [message] = tool_messages(chat_server)
    assert message.startswith("error: ")
    assert "backend down" in message
    assert answer.outcome == "OK"
    assert answer.candidate is not None
    assert answer.candidate.text == "sorry, that failed"
    [entry] = answer.event.errors or []
    # BitBrat's source for an MCP tool: "mcp:" before the tool's id, itself "mcp:fail".
    assert entry.source == "mcp:mcp:fail"
    assert "backend down" in entry.message
    metadata = answer.candidate.metadata or {}
    assert metadata["tools"] == [{"tool": "mcp:fail", "outcome": "error"}]


async def test_a_tool_error_that_cannot_be_stored_reaches_errors_repaired(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    """NUL in a tool's error text made the published event one that llm-bot itself refuses at
    decode (a later step of the slip) and a jsonb column downstream refuses to store."""
    sse_server.fail_text = "backend\x00down"
    chat_server.script_tool_call("mcp_fail", {})
    chat_server.script_reply("sorry, that failed")
    answer = await answerer(model, gateway).answer(inbound_of(event(), deadline_s=30))

    [entry] = answer.event.errors or []
    assert entry.message.endswith("backend\ufffddown")
    [message] = tool_messages(chat_server)
    assert message.endswith("backend\ufffddown")
    data, attributes = encode(answer.event)
    assert decode(data, attributes).errors == answer.event.errors


async def test_a_hanging_tool_times_out_and_the_event_completes(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, sse_server: ToolServer
) -> None:
    chat_server.script_tool_call("mcp_hang", {})
    chat_server.script_reply("it took too long")
    tools = answerer(model, gateway, LLM_BOT_TOOL_TIMEOUT_MS=300)
    answer = await tools.answer(inbound_of(event(), deadline_s=30))

    assert [call.tool for call in sse_server.calls] == ["hang"]
    assert tool_messages(chat_server) == ["error: mcp_hang timed out"]
    assert answer.outcome == "OK"
    [entry] = answer.event.errors or []
    assert entry.source == "mcp:mcp:hang"


async def test_a_hanging_tool_gets_half_the_events_time_left_and_the_model_still_answers(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient
) -> None:
    chat_server.script_tool_call("mcp_hang", {})
    chat_server.script_reply("it took too long")
    # The tool's own limit (15 s) is past the event's deadline: the deadline bounds the call.
    answer = await answerer(model, gateway).answer(inbound_of(event(), deadline_s=6))

    assert answer.outcome == "OK"
    assert tool_messages(chat_server) == ["error: mcp_hang timed out"]


async def test_a_meta_question_is_offered_the_status_tools_alone(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient
) -> None:
    chat_server.script_tool_call("internal_get_bot_status", {})
    chat_server.script_reply("all good")
    built = analysed(event("are you up?", roles=["moderator"]), intent="meta")
    answer = await answerer(model, gateway).answer(inbound_of(built, deadline_s=30))

    assert offered(chat_server) == {"internal_get_bot_status", "internal_list_available_tools"}
    [status] = tool_messages(chat_server)
    servers = json.loads(status)["servers"]
    assert [(s["name"], s["status"]) for s in servers] == [("tool-gateway", "connected")]
    use = strategy(answer)["toolUse"]
    reasons = {item["tool"]: item["reason"] for item in use["suppressed"]}
    assert reasons["mcp:echo"] == "meta intent only allows internal status tools"
    assert use["allowedCount"] == 2


@pytest.mark.parametrize("level", ["med", "high"])
async def test_medium_and_high_risk_offer_no_tools(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient, level: str
) -> None:
    built = analysed(event("hm", roles=["moderator"]), risk=level)
    # High risk escalates before the model; medium reaches it without tools.
    answer = await answerer(model, gateway, LLM_BOT_BEHAVIORAL_GATING_ENABLED="false").answer(
        inbound_of(built, deadline_s=30)
    )

    assert chat_server.chat_requests()
    assert all(not offered(chat_server, i) for i in range(len(chat_server.chat_requests())))
    use = strategy(answer)["toolUse"]
    assert use["allowedCount"] == 0
    assert any(item["tool"] == "mcp:echo" for item in use["suppressed"])


async def test_without_a_gateway_the_builtins_answer(
    chat_server: LocalModelServer, model: ModelClient
) -> None:
    chat_server.script_tool_call("internal_list_available_tools", {})
    chat_server.script_reply("these")
    answer = await answerer(model, None).answer(inbound_of(event(roles=["vip"]), deadline_s=30))

    [listing] = tool_messages(chat_server)
    available = json.loads(listing)
    assert available["requesterRoles"] == ["vip"]
    assert {tool["name"] for tool in available["availableTools"]} == {
        "basic:get_current_time",
        "internal:get_bot_status",
        "internal:list_available_tools",
        "adventure:narrate",
    }
    assert answer.outcome == "OK"


async def test_the_role_check_at_call_time_sends_nothing_for_a_user_without_the_role(
    gateway: McpClient, sse_server: ToolServer
) -> None:
    tool = listed(gateway, gateway.tools["ban_user"])
    key = CallKey("ada", "corr", "0:llm-bot", 0)
    refused = await tool.call({"user": "bob"}, ToolRequest(Caller("ada", ("vip",)), key, 5.0))
    assert refused.is_error
    assert "not allowed" in refused.text
    assert sse_server.calls == []
    done = await tool.call({"user": "bob"}, ToolRequest(Caller("ada", ("moderator",)), key, 5.0))
    assert done == ToolOutcome("banned bob")
    assert [call.tool for call in sse_server.calls] == ["ban_user"]


async def test_the_bot_status_lists_only_what_this_user_may_be_offered(
    chat_server: LocalModelServer, model: ModelClient, gateway: McpClient
) -> None:
    chat_server.script_tool_call("internal_get_bot_status", {})
    chat_server.script_reply("done")
    tools = answerer(model, gateway, LLM_BOT_TOOLS_ALLOW="mcp:echo,mcp:ban_user")
    await tools.answer(inbound_of(event(roles=["vip"]), deadline_s=30))

    [status] = tool_messages(chat_server)
    [server] = json.loads(status)["servers"]
    assert server["tools"] == ["echo"]  # not ban_user (a moderator's), nor what is held back
    assert json.loads(status)["usageSummary"]["totalRegisteredTools"] == 5  # 4 built-ins + echo
