"""The MCP client against a real SDK server: the gateway's SSE transport with its token and
agent name, Streamable HTTP, `_meta` on calls, list_changed, reconnect, no server at all, and
the circuit breaker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from llm_bot.platform_tools.breaker import CircuitBreaker
from llm_bot.platform_tools.client import CircuitOpen, McpClient, ToolUnavailable, gateway_client
from llm_bot.platform_tools.servers import ServerConfig, call_meta
from llm_bot.settings import load_settings
from llm_bot_tools.devstack.worker_harness import wait_until

from .conftest import ToolServer

pytestmark = pytest.mark.integration
SERVED = {
    "echo", "grow", "hang", "hold", "fail", "ban_user", "start_story", "get_state_prefix",
    "get_state", "agent.sendProgressUpdate", "inject", "big",
}  # fmt: skip

WAIT_S = 10.0
FAST = {"reconnect_base_s": 0.05, "reconnect_max_s": 0.2, "monitor_s": 0.2}


@asynccontextmanager
async def running(client: McpClient) -> AsyncIterator[McpClient]:
    client.start()
    try:
        yield client
    finally:
        await client.aclose()


def connected(client: McpClient) -> bool:
    return client.connected


def text_of(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


def gateway_for(server: ToolServer, token: str) -> McpClient:
    settings = load_settings(
        MCP_GATEWAY_URL=server.url,
        MCP_AUTH_TOKEN=token,
        MCP_RECONNECT_BASE_MS=50,
        MCP_RECONNECT_MAX_MS=200,
        MCP_RECONNECT_MONITOR_MS=200,
    )
    client = gateway_client(settings)
    assert client is not None
    return client


async def test_the_gateway_lists_its_tools_and_a_call_carries_the_user(
    sse_server: ToolServer,
) -> None:
    async with running(gateway_for(sse_server, "gateway-token")) as client:
        await client.wait_until(connected, WAIT_S)
        assert set(client.tools) == SERVED
        assert client.tools["echo"].input_schema["properties"]["text"]["type"] == "string"

        meta = call_meta("twitch:4711", ["moderator", "subscriber"])
        result = await client.call("echo", {"text": "hi"}, meta=meta, timeout_s=WAIT_S)

    assert not result.is_error
    assert text_of(result) == "echo: hi"
    [call] = sse_server.calls
    assert call.meta == {"userId": "twitch:4711", "userRoles": ["moderator", "subscriber"]}
    assert call.agent_name == "llm-bot"


async def test_a_wrong_token_is_refused_and_the_client_keeps_trying_without_a_session(
    sse_server: ToolServer,
) -> None:
    async with running(gateway_for(sse_server, "not-the-token")) as client:
        await client.wait_until(lambda _: sse_server.refused >= 2, WAIT_S)
        assert not client.connected
        assert client.tools == {}
        with pytest.raises(ToolUnavailable):
            await client.call("echo", {"text": "hi"}, meta=call_meta(None, []), timeout_s=1)
    assert sse_server.calls == []


async def test_streamable_http_lists_and_calls(http_server: ToolServer) -> None:
    config = ServerConfig("other", http_server.url, "streamable-http", {"x-agent-name": "llm-bot"})
    async with running(McpClient(config, **FAST)) as client:
        await client.wait_until(connected, WAIT_S)
        assert set(client.tools) == SERVED
        meta = call_meta("discord:42", ["viewer"])
        result = await client.call("echo", {"text": "over http"}, meta=meta, timeout_s=WAIT_S)

    assert text_of(result) == "echo: over http"
    assert http_server.calls[0].meta == {"userId": "discord:42", "userRoles": ["viewer"]}


async def test_a_tool_added_on_the_server_is_listed_after_list_changed(
    sse_server: ToolServer,
) -> None:
    async with running(gateway_for(sse_server, "gateway-token")) as client:
        await client.wait_until(connected, WAIT_S)
        assert "schedule_stream" not in client.tools
        await client.call("grow", {"name": "schedule_stream"}, meta={}, timeout_s=WAIT_S)
        await client.wait_until(lambda c: "schedule_stream" in c.tools, WAIT_S)
        assert client.connects == 1


@pytest.mark.parametrize("transport", ["sse", "streamable-http"])
async def test_a_restarted_server_is_reconnected_and_called_again(transport: str) -> None:
    server = ToolServer(transport)  # type: ignore[arg-type]
    await server.start()
    try:
        config = ServerConfig("restarting", server.url, server.transport)
        async with running(McpClient(config, **FAST)) as client:
            await client.wait_until(connected, WAIT_S)
            await server.stop()
            await client.wait_until(lambda c: not c.connected, WAIT_S)
            with pytest.raises(ToolUnavailable):
                await client.call("echo", {"text": "away"}, meta={}, timeout_s=1)

            await server.start()
            await client.wait_until(lambda c: c.connected and c.connects == 2, WAIT_S)
            result = await client.call("echo", {"text": "back"}, meta={}, timeout_s=WAIT_S)
        assert text_of(result) == "echo: back"
    finally:
        await server.stop()


async def test_a_hanging_tool_times_out_and_the_connection_still_serves(
    sse_server: ToolServer,
) -> None:
    async with running(gateway_for(sse_server, "gateway-token")) as client:
        await client.wait_until(connected, WAIT_S)
        with pytest.raises(TimeoutError):
            await client.call("hang", {}, meta={}, timeout_s=0.3)
        result = await client.call("echo", {"text": "after"}, meta={}, timeout_s=WAIT_S)
        assert client.status() == {"connected": True, "tools": len(SERVED)}
    assert text_of(result) == "echo: after"
    assert [call.tool for call in sse_server.calls] == ["hang", "echo"]


def test_no_gateway_url_means_no_gateway_client() -> None:
    assert gateway_client(load_settings()) is None
    assert gateway_client(load_settings(MCP_GATEWAY_URL="  ")) is None


async def test_a_server_that_stops_answering_fails_at_once_until_its_cool_down_is_over(
    sse_server: ToolServer,
) -> None:
    clock = FakeTicks()
    config = ServerConfig("gw", sse_server.url, "sse", {"x-mcp-token": "gateway-token"})
    breaker = CircuitBreaker("gw", threshold=2, reset_timeout_s=120, clock=clock)
    async with running(McpClient(config, **FAST, breaker=breaker)) as client:
        await client.wait_until(connected, WAIT_S)
        for _ in range(2):
            with pytest.raises(TimeoutError):
                await client.call("hang", {}, meta={}, timeout_s=0.2)
        with pytest.raises(CircuitOpen) as refused:
            await client.call("echo", {"text": "refused"}, meta={}, timeout_s=WAIT_S)
        assert isinstance(refused.value, ToolUnavailable)  # what a caller answers as an error
        assert "stopped answering" in str(refused.value)
        # A call given up on still reaches the server, maybe after its caller gave up.
        await wait_until(lambda: len(sse_server.calls) == 2, WAIT_S, "both hangs arrived")
        assert [call.tool for call in sse_server.calls] == ["hang", "hang"]  # echo never sent
        clock.now += 120
        result = await client.call("echo", {"text": "back"}, meta={}, timeout_s=WAIT_S)
        assert breaker.state == "closed"
    assert text_of(result) == "echo: back"


async def test_error_answers_leave_the_circuit_closed(http_server: ToolServer) -> None:
    """Bad arguments (a user can cause them at will) are answered: the server is healthy."""
    config = ServerConfig("tools", http_server.url, "streamable-http")
    async with running(McpClient(config, **FAST)) as client:
        await client.wait_until(connected, WAIT_S)
        for _ in range(3):
            result = await client.call("echo", {}, meta={}, timeout_s=WAIT_S)
            assert result.is_error
        assert client.breaker.state == "closed"
        result = await client.call("echo", {"text": "still"}, meta={}, timeout_s=WAIT_S)
    assert text_of(result) == "echo: still"


class FakeTicks:
    """The breaker's clock, moved by the test instead of waiting two minutes."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def test_one_users_result_past_the_message_limit_opens_no_circuit_for_the_others() -> None:
    """A result past the SDK's 1 MiB message limit drops the SSE stream, and with it every call
    in flight, whoever's: that says nothing of whether the server answers. Before, bob's and
    cat's calls lost with ada's made two users' failures in a row, opening the server's circuit
    for everyone for two minutes."""
    server = ToolServer("sse", token="gateway-token", big_chars=2_000_000)
    config = ServerConfig("gw", server.url, "sse", {"x-mcp-token": "gateway-token"})
    await server.start()
    try:
        async with running(McpClient(config, **FAST)) as client:
            await client.wait_until(connected, WAIT_S)
            in_flight = [
                asyncio.create_task(
                    client.call("hold", {"text": user}, meta={}, timeout_s=WAIT_S, user=user)
                )
                for user in ("bob", "cat")
            ]
            await wait_until(lambda: len(server.calls) == 2, WAIT_S, "both holds arrived")
            with pytest.raises(MCPError):
                await client.call("big", {}, meta={}, timeout_s=WAIT_S, user="ada")
            for lost in await asyncio.gather(*in_flight, return_exceptions=True):
                assert isinstance(lost, MCPError)
            await client.wait_until(lambda c: c.connected and c.connects == 2, WAIT_S)
            assert client.breaker.state == "closed"
            for user in ("dan", "ada"):
                result = await client.call(
                    "echo", {"text": user}, meta={}, timeout_s=WAIT_S, user=user
                )
                assert text_of(result) == f"echo: {user}"
    finally:
        server.release.set()
        await server.stop()
