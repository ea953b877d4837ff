"""Platform tools through a running worker: a real MCP server built with the SDK (HTTP + SSE with
the gateway's token check, or Streamable HTTP), the emulator, Postgres and the local model
server. The model calls a tool when the user's words hold a cue (``[[tool:NAME {json}]]``, see
:mod:`llm_bot_tools.local.openai_payloads`), so a retried event asks for the same call again, as
a real model given the same conversation does."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from llm_bot.events.codec import encode
from llm_bot.events.models import InternalEventV2
from llm_bot.platform_tools.client import McpClient
from llm_bot.settings import Settings
from llm_bot.worker.service import Worker
from llm_bot_tools.devstack.worker_harness import Bus, WorkerProcess, running_worker, wait_until
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.tool_output import shown
from ..platform_tools.conftest import ToolServer

pytestmark = pytest.mark.integration

TOKEN = "gateway-token"
WAIT_S = 30.0


def gateway_settings(server: ToolServer, **overrides: str) -> dict[str, str]:
    return {
        "MCP_GATEWAY_URL": server.url,
        "MCP_AUTH_TOKEN": TOKEN,
        "MCP_GATEWAY_TRANSPORT": server.transport,
        "MCP_RECONNECT_BASE_MS": "50",
        "MCP_RECONNECT_MAX_MS": "200",
        "MCP_RECONNECT_MONITOR_MS": "200",
        "LLM_BOT_TOOLS_ALLOW": "mcp:*",
        **overrides,
    }


def cue(tool: str, **arguments: Any) -> str:
    return f"[[tool:{tool} {json.dumps(arguments)}]]"


def asking(bus: Bus, text: str, roles: list[str] | None = None) -> InternalEventV2:
    event = prompt_event(text, user="ada", thread="stream", egress_topic=bus.egress_topic)
    assert event.identity.user is not None
    event.identity.user.roles = roles
    return event


def offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or []}


def tool_results(request: dict[str, Any]) -> list[str]:
    return [shown(m["content"]) for m in request["messages"] if m["role"] == "tool"]


@contextlib.asynccontextmanager
async def serving(server: ToolServer) -> AsyncIterator[ToolServer]:
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def connected(worker: Worker) -> McpClient:
    """The worker's gateway client once it is connected."""
    assert worker.gateway is not None
    await worker.gateway.wait_until(lambda c: c.connected, WAIT_S)
    return worker.gateway


@contextlib.asynccontextmanager
async def gateway_worker(server: ToolServer, settings: Settings) -> AsyncIterator[Worker]:
    """``server`` serving and a worker connected to it."""
    async with serving(server), running_worker(settings) as worker:
        await connected(worker)
        yield worker


@pytest.mark.parametrize("transport", ["sse", "streamable-http"])
async def test_tools_are_offered_and_called_for_the_user_with_their_roles(
    bus: Bus, model_server: LocalModelServer, transport: str
) -> None:
    server = ToolServer(transport, token=TOKEN if transport == "sse" else None)  # type: ignore[arg-type]
    egress = bus.tap(bus.egress_topic)
    async with gateway_worker(server, bus.settings(**gateway_settings(server))):
        text = "say " + cue("mcp_echo", text="hi") + cue("basic_get_current_time")
        bus.publish_event(asking(bus, text, roles=["vip"]))
        [message] = await egress.take(1, timeout_s=WAIT_S)
        with psycopg.connect(bus.environment["DATABASE_URL"]) as connection:
            recorded = connection.execute("SELECT tool_id, outcome FROM tool_calls").fetchall()

    first, second = model_server.chat_requests()
    assert {"mcp_echo", "mcp_hold", "basic_get_current_time", "upsertMemory"} <= offered(first)
    assert "mcp_ban_user" not in offered(first)  # needs a moderator
    [call] = server.calls
    assert (call.tool, call.arguments) == ("echo", {"text": "hi"})
    assert call.meta is not None
    assert (call.meta["userId"], call.meta["userRoles"]) == ("ada", ["vip"])
    echo, now = tool_results(second)
    assert echo == "echo: hi"
    assert "timestamp" in json.loads(now)
    assert recorded == [("mcp:echo", "echo: hi")]  # a read (the built-in) needs no record
    output = json.loads(message.data)
    assert output["candidates"][0]["metadata"]["tools"] == [
        {"tool": "mcp:echo", "outcome": "ok"},
        {"tool": "basic:get_current_time", "outcome": "ok"},
    ]
    assert not output.get("errors")


async def test_a_forbidden_tool_a_hidden_tool_and_a_failing_one(
    bus: Bus, model_server: LocalModelServer
) -> None:
    """A call the user's roles do not allow, and one the allowlist hides, are never sent; a
    failing tool answers the model an error and the event completes with an errors[] entry."""
    server = ToolServer("sse", token=TOKEN)
    settings = bus.settings(**gateway_settings(server, LLM_BOT_TOOLS_ALLOW="mcp:ban_user,mcp:fail"))
    egress = bus.tap(bus.egress_topic)
    async with gateway_worker(server, settings):
        text = cue("mcp_ban_user", user="bob") + cue("mcp_echo", text="x") + cue("mcp_fail")
        bus.publish_event(asking(bus, text, roles=["viewer"]))
        [message] = await egress.take(1, timeout_s=WAIT_S)

    first = model_server.chat_requests()[0]
    assert {"mcp_ban_user", "mcp_echo"} & offered(first) == set()
    assert "mcp_fail" in offered(first)
    assert [call.tool for call in server.calls] == ["fail"]  # nothing else reached the server
    output = json.loads(message.data)
    [error] = output["errors"]
    assert error["source"] == "mcp:mcp:fail"  # BitBrat's `mcp:${tool.id}`
    assert output["candidates"][0]["text"]


async def test_a_hanging_tool_is_cut_off_and_the_event_completes(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    settings = bus.settings(**gateway_settings(server, LLM_BOT_TOOL_TIMEOUT_MS="500"))
    egress = bus.tap(bus.egress_topic)
    async with gateway_worker(server, settings):
        bus.publish_event(asking(bus, cue("mcp_hang")))
        [message] = await egress.take(1, timeout_s=WAIT_S)

    output = json.loads(message.data)
    assert [e["source"] for e in output["errors"]] == ["mcp:mcp:hang"]
    assert output["candidates"][0]["metadata"]["tools"] == [
        {"tool": "mcp:hang", "outcome": "error"}
    ]
    [_, second] = model_server.chat_requests()
    assert "error" in tool_results(second)[0].lower()


async def test_a_restarted_server_and_a_tool_added_at_run_time(
    bus: Bus, model_server: LocalModelServer
) -> None:
    """The server goes away mid-run: the event in flight completes (its call is answered as an
    error); the worker reconnects, and a tool the server adds is offered to the next event."""
    server = ToolServer("sse", token=TOKEN)
    egress = bus.tap(bus.egress_topic)
    async with gateway_worker(server, bus.settings(**gateway_settings(server))) as worker:
        gateway = await connected(worker)
        connects = gateway.connects
        bus.publish_event(asking(bus, cue("mcp_hold", text="in flight")))
        await wait_until(lambda: len(server.calls) == 1, WAIT_S, "the call reached the server")
        await server.stop()
        [cut] = await egress.take(1, timeout_s=WAIT_S)
        await server.start()
        await gateway.wait_until(lambda c: c.connected and c.connects > connects, WAIT_S)

        bus.publish_event(asking(bus, cue("mcp_grow", name="schedule_stream")))
        await egress.take(1, timeout_s=WAIT_S)
        await gateway.wait_until(lambda c: "schedule_stream" in c.tools, WAIT_S)
        bus.publish_event(asking(bus, cue("mcp_schedule_stream")))
        [last] = await egress.take(1, timeout_s=WAIT_S)

    assert [e["source"] for e in json.loads(cut.data)["errors"]] == ["mcp:mcp:hold"]
    assert "mcp_schedule_stream" in offered(model_server.chat_requests()[-2])
    assert json.loads(last.data)["candidates"][0]["metadata"]["tools"] == [
        {"tool": "mcp:schedule_stream", "outcome": "ok"}
    ]


async def test_one_event_published_twice_to_two_workers_calls_the_tool_once(
    bus: Bus, model_server: LocalModelServer
) -> None:
    server = ToolServer("sse", token=TOKEN)
    event = asking(bus, cue("mcp_hold", text="ban once"))
    data, attributes = encode(event)
    egress = bus.tap(bus.egress_topic)
    async with serving(server), contextlib.AsyncExitStack() as stack:
        workers = await asyncio.gather(
            *(
                stack.enter_async_context(running_worker(bus.settings(**gateway_settings(server))))
                for _ in range(2)
            )
        )
        await asyncio.gather(*(connected(worker) for worker in workers))
        bus.publish(data, attributes)
        bus.publish(data, attributes)
        await wait_until(lambda: len(server.calls) == 1, WAIT_S, "the call reached the server")
        server.release.set()
        [first] = await egress.take(1, timeout_s=WAIT_S)
        await wait_until(lambda: sum(w.stats.acked for w in workers) == 2, 60, "both copies acked")
        later = await egress.drain()

    assert len(server.calls) == 1
    assert all(copy.data == first.data for copy in later)
    assert json.loads(first.data)["correlationId"] == event.correlation_id


async def test_a_worker_killed_after_a_tool_call_the_retry_does_not_call_again(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    """The first worker dies once the call's outcome is recorded (the model is answering with
    it); the event is redelivered to a second worker, whose model asks for the same call: it is
    answered the recorded outcome and the server sees one call."""
    server = ToolServer("sse", token=TOKEN)
    environment = bus.worker_environment(
        **gateway_settings(server), LLM_BOT_CLAIM_LEASE_S="2", LLM_BOT_EVENT_DEADLINE_MS="30000"
    )
    egress = bus.tap(bus.egress_topic)
    async with serving(server):
        first = WorkerProcess(environment, tmp_path / "first.log").start()
        try:
            bus.publish_event(asking(bus, cue("mcp_hold", text="schedule friday")))
            await wait_until(lambda: len(server.calls) == 1, WAIT_S, "the call was sent")
            model_server.hang_next(1, seconds=60)  # the model's turn after the tool result
            server.release.set()
            await wait_until(
                lambda: len(model_server.chat_requests()) == 2, WAIT_S, "the outcome was recorded"
            )
        finally:
            first.kill()
        second = WorkerProcess(environment, tmp_path / "second.log").start()
        try:
            [message] = await egress.take(1, timeout_s=60)
        finally:
            second.kill()

    assert len(server.calls) == 1, second.log_tail()
    *_, retried = model_server.chat_requests()
    assert tool_results(retried) == ["held: schedule friday"]
    assert json.loads(message.data)["candidates"][0]["metadata"]["tools"] == [
        {"tool": "mcp:hold", "outcome": "ok"}
    ]
