"""Platform tools without a server: who the caller is, BitBrat's role and scope rules, the
allowlist and its default, a listed tool as the model sees it, the built-ins, and the offer
an event makes (roles, scope, behaviour profile)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import mcp.types as types
import pytest

from llm_bot.events.models import AnnotationV1, InternalEventV2, UserIdentity
from llm_bot.graph.behavior.profile import Profile, derive_profile
from llm_bot.graph.offering import MAX_OFFERED_TOOLS, make_offer
from llm_bot.platform_tools.builtins import NARRATOR_INSTRUCTION, builtin_tools
from llm_bot.platform_tools.calls import CallKey
from llm_bot.platform_tools.catalog import ToolCatalog, allowed, allowlist
from llm_bot.platform_tools.client import McpClient
from llm_bot.platform_tools.gateway import listed, unfit
from llm_bot.platform_tools.platform import (
    Caller,
    ToolRequest,
    caller_of,
    error_source,
    requested_scope,
    roles_allow,
    scope_allows,
)
from llm_bot.platform_tools.servers import ServerConfig
from llm_bot.platform_tools.subjects import subjects_of
from llm_bot.settings import load_settings
from llm_bot_tools.local.prompt_events import prompt_event

NOW = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
KEY = CallKey("ada", "corr", "0:llm-bot", 0)
CLIENT = McpClient(
    ServerConfig("tool-gateway", "http://127.0.0.1:9/sse", "sse"),
    reconnect_base_s=1,
    reconnect_max_s=1,
    monitor_s=1,
)
# Every tool BitBrat's services register, as llm-bot's ids name them (settings.py's list).
BITBRAT_TOOLS = [
    "mcp:update_user", "mcp:ban_user", "mcp:create_api_token", "mcp:list_rules",
    "mcp:get_rule", "mcp:create_rule", "mcp:event_stream_analyzer.observer.create",
    "mcp:twitch.eventsub.config.reload", "mcp:reflex.create", "mcp:reflex.list",
    "mcp:list_schedules", "mcp:get_schedule", "mcp:create_schedule", "mcp:update_schedule",
    "mcp:delete_schedule", "mcp:get_state", "mcp:get_state_prefix", "mcp:propose_mutation",
    "mcp:start_story", "mcp:get_current_scene", "mcp:process_action", "mcp:commit_scene",
    "mcp:update_world_state", "mcp:summarize_stream", "mcp:generate_image",
    "mcp:agent.sendProgressUpdate", "mcp:scheduler/bit.info", "mcp:auth/bit.shutdown",
    "mcp:llm-bot/bit.llm.toolFilter", "mcp:obs.set_scene_item_enabled",
]  # fmt: skip


def event(roles: list[str] | None = None, scope: object = None) -> InternalEventV2:
    built = prompt_event("hi", user="ada", thread="room", egress_topic="out")
    assert built.identity.user is not None
    built.identity.user.roles = roles
    if scope is not None:
        built.metadata = {"scope": scope}
    return built


def profile_of(intent: str = "question", level: str = "none") -> Profile:
    return derive_profile(
        [
            AnnotationV1(id="i", kind="intent", value=intent),
            AnnotationV1(id="r", kind="risk", label=level, payload={"level": level}),
        ]
    )


def gateway_tool(name: str, **fields: Any) -> Any:
    return listed(CLIENT, types.Tool(name=name, input_schema={"type": "object"}, **fields))


def test_the_caller_is_bitbrats_user_roles_and_id() -> None:
    external_only = event()
    external_only.identity.user = None
    external_only.identity.external.roles = ["vip"]
    assert who(external_only) == (external_only.identity.external.id, ("vip",))
    # identity.user's roles win even when empty, as [] is truthy to BitBrat's ||.
    both = event(roles=[])
    both.identity.external.roles = ["moderator"]
    assert who(both) == ("ada", ())
    neither = event()
    neither.identity.user = UserIdentity(id="u-1")
    assert who(neither) == ("u-1", ())


def who(built: InternalEventV2) -> tuple[str | None, tuple[str, ...]]:
    caller = caller_of(built)
    return caller.user_id, caller.roles


def test_the_caller_is_answered_where_the_event_is() -> None:
    built = event()
    built.egress.metadata = {"thread": "t-1"}
    caller = caller_of(built)
    assert caller.egress == {
        "destination": "out", "type": "chat", "connector": "cli", "channel": "room",
    }  # fmt: skip
    assert caller.channel == "room"
    built.egress.channel = None
    assert caller_of(built).channel == built.ingress.channel


def test_bitbrats_role_and_scope_rules() -> None:
    assert roles_allow((), ())
    assert roles_allow(("moderator", "broadcaster"), ("broadcaster",))
    assert not roles_allow(("moderator",), ("vip",))
    assert scope_allows((), "story")
    assert scope_allows(("story",), None)
    assert scope_allows(("story",), "story")
    assert not scope_allows(("story",), "ops")
    assert requested_scope(event(scope="story")) == "story"
    assert requested_scope(event(scope=["story"])) is None
    assert requested_scope(event()) is None


def test_the_allowlist_is_glob_patterns_over_tool_ids() -> None:
    patterns = allowlist(" mcp:get_* , ,mcp:*/bit.info")
    assert patterns == ("mcp:get_*", "mcp:*/bit.info")
    assert allowed("mcp:get_schedule", patterns)
    assert allowed("mcp:scheduler/bit.info", patterns)
    assert not allowed("mcp:ban_user", patterns)
    assert not allowed("MCP:get_schedule", patterns)
    assert not allowed("mcp:get_schedule", allowlist(""))


def test_the_default_allowlist_keeps_moderation_and_operator_tools_out() -> None:
    patterns = allowlist(load_settings().tools_allow)
    offered = {
        tool
        for tool in BITBRAT_TOOLS
        if allowed(tool, patterns, pinnable=subjects_of(tool, {}).pinnable)
    }
    assert offered == {
        "mcp:list_schedules", "mcp:get_schedule", "mcp:get_state_prefix",
        "mcp:start_story", "mcp:get_current_scene", "mcp:process_action", "mcp:commit_scene",
        "mcp:update_world_state", "mcp:summarize_stream", "mcp:generate_image",
        "mcp:agent.sendProgressUpdate",
    }  # fmt: skip


def test_a_listed_tool_as_the_model_sees_it() -> None:
    tool = gateway_tool(
        "agent.sendProgressUpdate",
        description="Send progress",
        meta={"requiredRoles": ["moderator", 3], "scopes": ["story"]},
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    assert tool.tool_id == "mcp:agent.sendProgressUpdate"
    assert tool.spec.name == "mcp_agent_sendProgressUpdate"
    assert tool.spec.description == "Send progress"
    assert (tool.required_roles, tool.scopes, tool.side_effects) == (
        ("moderator",),
        ("story",),
        False,
    )
    assert error_source(tool) == "mcp:mcp:agent.sendProgressUpdate"
    platform = gateway_tool("bit.info")
    assert platform.tool_id == "mcp:tool-gateway/bit.info"
    assert platform.spec.name == "mcp_tool-gateway_bit_info"
    assert platform.side_effects
    assert platform.required_roles == ()
    untyped = listed(CLIENT, types.Tool(name="x", input_schema={"type": "None"}))
    assert untyped.spec.parameters == {"type": "object", "properties": {}}


async def test_the_builtins_answer_as_bitbrats() -> None:
    catalog = ToolCatalog(None, ("mcp:*",), clock=lambda: NOW)
    tools = {tool.tool_id: tool for tool in catalog.tools()}
    assert set(tools) == {
        "basic:get_current_time", "internal:get_bot_status",
        "internal:list_available_tools", "adventure:narrate",
    }  # fmt: skip
    assert all(
        not tool.side_effects and error_source(tool) == "internal" for tool in tools.values()
    )
    request = ToolRequest(Caller("ada", ("vip",)), KEY, 1.0)

    now = json.loads((await tools["basic:get_current_time"].call({}, request)).text)
    assert (now["iso"], now["timestamp"]) == ("2026-03-01T12:30:00.000Z", 1772368200000)
    status = json.loads((await tools["internal:get_bot_status"].call({}, request)).text)
    assert status["servers"] == []
    assert status["usageSummary"]["totalRegisteredTools"] == 4
    listing = json.loads((await tools["internal:list_available_tools"].call({}, request)).text)
    assert listing["requesterRoles"] == ["vip"]
    assert listing["count"] == 4
    narrated = json.loads((await tools["adventure:narrate"].call({}, request)).text)
    assert narrated == {"instruction": NARRATOR_INSTRUCTION}
    assert tools["adventure:narrate"].scopes == ("story",)


async def test_list_available_tools_leaves_out_what_the_roles_do_not_allow() -> None:
    moderated = gateway_tool("ban_user", meta={"requiredRoles": ["moderator"]})
    builtins = builtin_tools(Directory([moderated]), lambda: NOW)
    [available_tool] = [t for t in builtins if t.tool_id == "internal:list_available_tools"]
    request = ToolRequest(Caller("ada", ("vip",)), KEY, 1.0)
    assert json.loads((await available_tool.call({}, request)).text)["availableTools"] == []
    moderator = ToolRequest(Caller("ada", ("moderator",)), KEY, 1.0)
    [entry] = json.loads((await available_tool.call({}, moderator)).text)["availableTools"]
    assert entry == {
        "name": "mcp:ban_user",
        "displayName": "ban_user",
        "source": "mcp",
        "description": "",
        "requiredRoles": ["moderator"],
    }


class Directory:
    def __init__(self, tools: list[Any]) -> None:
        self._tools = tools

    def tools(self) -> list[Any]:
        return self._tools

    def servers(self) -> list[McpClient]:
        return []


def offer_for(built: InternalEventV2, profile: Profile) -> Any:
    platform = [
        *ToolCatalog(None, ()).tools(),
        gateway_tool("echo"),
        gateway_tool("ban_user", meta={"requiredRoles": ["moderator"]}),
        gateway_tool("start_story", meta={"scopes": ["story"]}),
    ]
    return make_offer(built, profile, [], platform, filter_enabled=True)


def test_an_offer_leaves_out_tools_the_users_roles_do_not_allow_silently() -> None:
    offer = offer_for(event(roles=["vip"]), profile_of())
    assert "mcp_ban_user" not in offer.platform
    assert "mcp_echo" in offer.platform
    assert offer.use.suppressed == ()
    assert offer.use.scope_suppressed == ()
    assert "mcp_ban_user" in offer_for(event(roles=["moderator"]), profile_of()).platform


def test_an_offer_records_what_the_requested_scope_holds_back() -> None:
    offer = offer_for(event(scope="ops"), profile_of())
    assert offer.use.scope_suppressed == (
        ("adventure:narrate", "mismatched scope (requested: ops, tool: story)"),
        ("mcp:start_story", "mismatched scope (requested: ops, tool: story)"),
    )
    assert "mcp_echo" in offer.platform  # a tool with no scopes serves every scope
    assert "mcp_start_story" in offer_for(event(scope="story"), profile_of()).platform


def test_a_meta_question_is_offered_the_status_tools_alone() -> None:
    offer = offer_for(event(roles=["moderator"]), profile_of("meta"))
    assert offer.names == ["internal_get_bot_status", "internal_list_available_tools"]
    assert ("mcp:echo", "meta intent only allows internal status tools") in offer.use.suppressed


@pytest.mark.parametrize("level", ["med", "high"])
def test_medium_and_high_risk_are_offered_no_tool(level: str) -> None:
    offer = offer_for(event(roles=["moderator"]), profile_of(level=level))
    assert offer.names == []
    assert offer.specs == []
    assert len(offer.use.suppressed) == 7


def test_a_listing_reaches_the_model_bounded() -> None:
    long_name = gateway_tool("n" * 61)  # mcp_ + 61 = 65 characters
    assert unfit(long_name) == "name longer than 64 characters"
    assert unfit(gateway_tool("n" * 60)) is None
    # Its id is stored with each call (a Postgres text), its id and scopes are published (in
    # errors[], in the response-strategy annotation): a NUL failed every call, or every event.
    unstorable = "name, roles or scopes hold a character that cannot be stored"
    assert unfit(gateway_tool("nul\x00name")) == unstorable
    assert unfit(gateway_tool("scoped", meta={"scopes": ["st\x00ory"]})) == unstorable
    assert unfit(gateway_tool("guarded", meta={"requiredRoles": ["mo\x00d"]})) == unstorable
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(12):
        deep = {"type": "object", "properties": {"x": deep}}
    nested = listed(CLIENT, types.Tool(name="deep", input_schema=deep))
    assert unfit(nested) == "schema nested deeper than 10 levels"
    wide = {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(500)}}
    assert unfit(listed(CLIENT, types.Tool(name="wide", input_schema=wide))) is not None
    described = gateway_tool("talky", description="word " * 1000)
    assert 1000 < len(described.spec.description) <= 1024
    assert described.spec.description.endswith("of 5000 characters shown]")


def test_an_offer_holds_no_more_tools_than_a_model_request_may(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OpenAI refuses a request offering more than 128 tools: a gateway listing more that the
    allowlist passed failed every event as LLM_REQUEST_INVALID."""
    many = [gateway_tool(f"tool{n:03}") for n in range(200)]
    builtins = ToolCatalog(None, ()).tools()
    offer = make_offer(event(), profile_of(), [], [*builtins, *many], filter_enabled=True)
    assert len(offer.specs) == MAX_OFFERED_TOOLS == 128
    shown = [tool.tool_id for tool in offer.platform.values()]
    assert shown == [tool.tool_id for tool in [*builtins, *many]][:128]
    assert "more tools pass the filters than a model request may offer" in caplog.text
    few = make_offer(event(), profile_of(), [], many[:5], filter_enabled=True)
    assert len(few.specs) == 5
