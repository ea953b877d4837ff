"""A worker with a tool-gateway configured is ready with it or without it, and says which."""

from __future__ import annotations

import pytest

from llm_bot_tools.devstack.worker_harness import Bus, running_worker

from ..platform_tools.conftest import ToolServer

pytestmark = pytest.mark.integration

WAIT_S = 10.0


async def test_the_worker_is_ready_without_its_gateway_and_with_it(bus: Bus) -> None:
    gateway = ToolServer("sse", token="worker-token")  # its port is known, nothing listens there
    settings = bus.settings(
        MCP_GATEWAY_URL=gateway.url,
        MCP_AUTH_TOKEN="worker-token",
        MCP_RECONNECT_BASE_MS="50",
        MCP_RECONNECT_MAX_MS="200",
        MCP_RECONNECT_MONITOR_MS="200",
    )
    async with running_worker(settings) as worker:
        assert worker.gateway is not None
        ready, detail = await worker.readiness()
        assert ready
        assert detail.endswith("; tool-gateway not connected (built-in tools only)")

        await gateway.start()
        try:
            await worker.gateway.wait_until(lambda client: client.connected, WAIT_S)
            ready, detail = await worker.readiness()
        finally:
            await gateway.stop()
    assert ready
    assert detail.endswith("; tool-gateway connected (12 tools)")


async def test_a_worker_without_a_gateway_says_nothing_of_one(bus: Bus) -> None:
    async with running_worker(bus.settings()) as worker:
        assert worker.gateway is None
        ready, detail = await worker.readiness()
    assert ready
    assert "tool-gateway" not in detail
