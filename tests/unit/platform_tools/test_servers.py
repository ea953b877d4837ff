"""What the gateway is sent and what the model sees of its tools, as BitBrat's llm-bot does."""

from __future__ import annotations

import pytest

from llm_bot.platform_tools.servers import call_meta, gateway_config, model_name, tool_id
from llm_bot.settings import load_settings


def test_the_gateway_is_reached_over_sse_with_its_token_and_llm_bots_name() -> None:
    settings = load_settings(MCP_GATEWAY_URL=" http://tool-gateway:3000/sse ", MCP_AUTH_TOKEN="s3")
    config = gateway_config(settings)
    assert config is not None
    assert (config.name, config.url, config.transport) == (
        "tool-gateway",
        "http://tool-gateway:3000/sse",
        "sse",
    )
    assert config.headers == {"x-mcp-token": "s3", "x-agent-name": "llm-bot"}


def test_no_gateway_without_its_url() -> None:
    assert gateway_config(load_settings()) is None


def test_meta_carries_roles_and_the_user_id_when_there_is_one() -> None:
    assert call_meta("twitch:1", ("mod",)) == {"userRoles": ["mod"], "userId": "twitch:1"}
    assert call_meta(None, []) == {"userRoles": []}


@pytest.mark.parametrize(
    ("name", "expected_id", "expected_model_name"),
    [
        ("create_schedule", "mcp:create_schedule", "mcp_create_schedule"),
        (
            "agent.sendProgressUpdate",
            "mcp:agent.sendProgressUpdate",
            "mcp_agent_sendProgressUpdate",
        ),
        ("bit.status", "mcp:tool-gateway/bit.status", "mcp_tool-gateway_bit_status"),
        ("internal:get_current_time", "internal:get_current_time", "internal_get_current_time"),
    ],
)
def test_tool_ids_and_the_names_the_model_sees(
    name: str, expected_id: str, expected_model_name: str
) -> None:
    assert tool_id("tool-gateway", name) == expected_id
    assert model_name(expected_id) == expected_model_name
