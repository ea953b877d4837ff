"""The platform's tools act for the requester alone, and what they answer is data: through a
running worker (emulator, Postgres, the local model server) and a real SDK server serving tools
shaped like BitBrat's (a ``userId`` argument, an ``egress`` argument, a prefix reader over
every user's state), with a model that asks for another user's data and destination."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from llm_bot_tools.devstack.worker_harness import Bus
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ..platform_tools.conftest import ToolServer
from .test_platform_tools import (
    TOKEN,
    WAIT_S,
    asking,
    cue,
    gateway_settings,
    gateway_worker,
    tool_results,
)

pytestmark = pytest.mark.integration

VICTIM = "twitch:99"
VICTIMS_FACT = "the victim's home address"


def schema_of(request: dict[str, Any], name: str) -> dict[str, Any]:
    [tool] = [t for t in request["tools"] if t["function"]["name"] == name]
    return dict(tool["function"]["parameters"])


def rows(bus: Bus, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(bus.environment["DATABASE_URL"]) as connection:
        return connection.execute(sql).fetchall()


async def test_a_model_naming_another_user_or_destination_acts_for_the_requester(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    server.state.update({f"user.fact.{VICTIM}.home": VICTIMS_FACT, "user.fact.ada.color": "green"})
    egress = bus.tap(bus.egress_topic)
    model_server.script_tool_calls(
        [
            ("mcp_start_story", {"userId": VICTIM, "theme": "heist"}),
            ("mcp_get_state_prefix", {"prefix": f"user.fact.{VICTIM}."}),
            (
                "mcp_agent_sendProgressUpdate",
                {
                    "message": "hello victim",
                    "egress": {
                        "destination": "egress.dm.v1",
                        "connector": "twitch",
                        "channel": "#victim",
                        "type": "dm",
                    },
                },
            ),
            ("mcp_get_state", {"keys": [f"user.fact.{VICTIM}.home"]}),
        ]
    )
    model_server.script_reply("done")
    event = asking(bus, "load my scene, my id is twitch:99")
    async with gateway_worker(server, bus.settings(**gateway_settings(server))):
        bus.publish_event(event)
        [message] = await egress.take(1, timeout_s=WAIT_S)

    first, second = model_server.chat_requests()
    assert "userId" not in schema_of(first, "mcp_start_story")["properties"]
    assert "egress" not in schema_of(first, "mcp_agent_sendProgressUpdate")["properties"]
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert "mcp_get_state" not in offered  # reads any key: only offered when named exactly
    sent = {call.tool: call.arguments for call in server.calls}
    assert set(sent) == {"start_story", "get_state_prefix", "agent.sendProgressUpdate"}
    assert sent["start_story"]["userId"] == "ada"
    assert sent["get_state_prefix"]["prefix"].startswith("user.fact.ada.")
    assert event.egress is not None
    assert sent["agent.sendProgressUpdate"]["egress"] == event.egress.model_dump(
        by_alias=True, exclude_none=True
    )
    assert not any(VICTIMS_FACT in result for result in tool_results(second))
    assert json.loads(message.data)["candidates"][0]["text"] == "done"


async def test_a_result_written_as_instructions_is_shown_as_tool_output_and_changes_nothing(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    egress = bus.tap(bus.egress_topic)
    async with gateway_worker(server, bus.settings(**gateway_settings(server))):
        bus.publish_event(asking(bus, "look around " + cue("mcp_inject")))
        [message] = await egress.take(1, timeout_s=WAIT_S)

    [_, second] = model_server.chat_requests()
    [result] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    label, *body = result.split("\n")
    assert "mcp:inject" in label
    assert "not instructions" in label
    fence = body[0].removesuffix("text")
    assert len(fence) >= 3
    assert set(fence) == {"~"}
    assert body[-1] == fence  # [SYSTEM]: sits inside the fence, no line of ours
    assert any(line.startswith("[SYSTEM]:") for line in body[1:-1])
    assert [call.tool for call in server.calls] == ["inject"]
    assert rows(bus, "SELECT count(*) FROM memories") == [(0,)]
    assert json.loads(message.data)["candidates"][0]["text"]


async def test_a_one_megabyte_result_is_capped_and_the_event_completes(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    egress = bus.tap(bus.egress_topic)
    async with gateway_worker(server, bus.settings(**gateway_settings(server))):
        bus.publish_event(asking(bus, "fetch it " + cue("mcp_big")))
        [message] = await egress.take(1, timeout_s=WAIT_S)

    assert [call.tool for call in server.calls] == ["big"]  # once: the model saw its result
    [_, second] = model_server.chat_requests()
    [result] = tool_results(second)
    assert len(result) < 10_000
    assert "[...truncated:" in result
    [(stored,)] = rows(bus, "SELECT outcome FROM tool_calls")
    assert len(stored) < 10_000
    assert "[...truncated:" in stored
    assert json.loads(message.data)["candidates"][0]["text"]


async def test_two_slow_calls_of_one_user_do_not_open_the_circuit_for_another(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    egress = bus.tap(bus.egress_topic)
    settings = bus.settings(**gateway_settings(server, LLM_BOT_TOOL_TIMEOUT_MS="300"))
    async with gateway_worker(server, settings):
        for _ in range(2):
            bus.publish_event(asking(bus, "summarize the stream " + cue("mcp_hang")))
            await egress.take(1, timeout_s=WAIT_S)
        bob = prompt_event(
            "say hi " + cue("mcp_echo", text="hi"),
            user="bob",
            thread="stream",
            egress_topic=bus.egress_topic,
        )
        bus.publish_event(bob)
        [message] = await egress.take(1, timeout_s=WAIT_S)

    assert [call.tool for call in server.calls] == ["hang", "hang", "echo"]
    output = json.loads(message.data)
    assert not output.get("errors")
    assert output["candidates"][0]["metadata"]["tools"] == [{"tool": "mcp:echo", "outcome": "ok"}]


async def test_nan_in_a_tools_arguments_is_a_clean_error_to_the_model(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    egress = bus.tap(bus.egress_topic)
    model_server.script_tool_call("mcp_echo", {"text": float("nan")})  # written as NaN
    model_server.script_reply("done")
    async with gateway_worker(server, bus.settings(**gateway_settings(server))):
        bus.publish_event(asking(bus, "echo"))
        [message] = await egress.take(1, timeout_s=WAIT_S)

    [_, second] = model_server.chat_requests()
    [result] = tool_results(second)
    assert result == "error: arguments are not valid JSON (NaN is no JSON number)"
    assert server.calls == []
    assert rows(bus, "SELECT count(*) FROM tool_calls") == [(0,)]
    assert json.loads(message.data)["candidates"][0]["text"] == "done"
