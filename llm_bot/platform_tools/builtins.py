"""BitBrat's built-in tools of its llm-bot (``src/services/llm-bot/tools/{basic,internal,
adventure}-tools.ts``), same ids, descriptions and schemas; every one reads, none changes
anything, and none needs the gateway.

- ``basic:get_current_time``: the time as BitBrat's answers it (``iso``, ``timestamp`` in ms,
  ``timezoneOffset`` in minutes as JavaScript counts it, ``localString``, ``timezoneName``).
- ``internal:get_bot_status``: each MCP server's name, status, transport and the tools of it
  this user may be offered (allowlisted, roles allowing), and their number. BitBrat's lists
  every tool the server has, which tells any user what the platform can do (``ban_user``,
  ``create_api_token``). BitBrat adds per-server call counts and latency from its own stats;
  here those are the metrics ``llmbot_tool_calls_total`` and the ``execute_tool`` spans.
- ``internal:list_available_tools``: the platform tools the caller's roles allow (BitBrat's
  filter), with id, display name, source, description and required roles.
- ``adventure:narrate`` (scope ``story``): BitBrat's answers a fixed instruction to use the
  story engine's tools and narrate; so does this one. BitBrat's schema has a ``userId``, which
  it ignores; it is not offered here, as no argument naming a user is (``subjects.py``).

Results are JSON text, as BitBrat's SDK hands the model a tool's returned object.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from llm_bot.llm.messages import ToolSpec
from llm_bot.platform_tools.calls import ToolOutcome
from llm_bot.platform_tools.client import McpClient
from llm_bot.platform_tools.platform import Caller, PlatformTool, ToolRequest, roles_allow
from llm_bot.platform_tools.servers import model_name

Handler = Callable[[Mapping[str, Any], ToolRequest], Awaitable[dict[str, Any]]]
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}
NARRATOR_INSTRUCTION = (
    "Use story-engine-mcp tools to update the story state and then narrate the consequence."
)


class Directory(Protocol):
    """What the status tools read: the platform tools and the servers, as they are now."""

    def tools(self) -> Sequence[PlatformTool]: ...

    def servers(self) -> Sequence[McpClient]: ...


@dataclass(frozen=True)
class BuiltinTool:
    """A tool llm-bot answers itself (BitBrat's ``source: 'internal'``)."""

    tool_id: str
    display_name: str
    spec: ToolSpec
    handler: Handler
    scopes: tuple[str, ...] = ()
    required_roles: tuple[str, ...] = ()
    side_effects: bool = False
    source = "internal"

    def bind(self, arguments: Mapping[str, Any], caller: Caller) -> dict[str, Any] | str:
        """Every built-in acts for the event's caller already: nothing to pin."""
        return dict(arguments)

    async def call(self, arguments: Mapping[str, Any], request: ToolRequest) -> ToolOutcome:
        return ToolOutcome(json.dumps(await self.handler(arguments, request)))


def builtin_tools(directory: Directory, clock: Callable[[], datetime]) -> tuple[BuiltinTool, ...]:
    async def current_time(arguments: Mapping[str, Any], request: ToolRequest) -> dict[str, Any]:
        return time_of(clock())

    async def bot_status(arguments: Mapping[str, Any], request: ToolRequest) -> dict[str, Any]:
        return status_of(directory, clock(), request.caller.roles)

    async def available(arguments: Mapping[str, Any], request: ToolRequest) -> dict[str, Any]:
        return available_to(directory.tools(), request.caller.roles)

    async def narrate(arguments: Mapping[str, Any], request: ToolRequest) -> dict[str, Any]:
        return {"instruction": NARRATOR_INSTRUCTION}

    return (
        _builtin(
            "internal:get_bot_status",
            "Get Bot Status",
            "Returns the current status of the bot, including connected MCP servers and tool"
            " usage statistics.",
            bot_status,
        ),
        _builtin(
            "internal:list_available_tools",
            "List Available Tools",
            "Lists all tools currently registered and available to you based on your permissions.",
            available,
        ),
        _builtin(
            "basic:get_current_time",
            "Get Current Time",
            "Returns the current time and date in ISO 8601 format and local timezone information.",
            current_time,
        ),
        _builtin(
            "adventure:narrate",
            "Adventure Narrator",
            "Generates the next chapter of the adventure and lists choices.",
            narrate,
            parameters={
                "type": "object",
                "properties": {"lastAction": {"type": "string"}},
            },
            scopes=("story",),
        ),
    )


def _builtin(
    identity: str,
    display_name: str,
    description: str,
    handler: Handler,
    parameters: dict[str, Any] | None = None,
    scopes: tuple[str, ...] = (),
) -> BuiltinTool:
    spec = ToolSpec(model_name(identity), description, parameters or NO_ARGUMENTS)
    return BuiltinTool(identity, display_name, spec, handler, scopes)


def time_of(now: datetime) -> dict[str, Any]:
    local = now.astimezone()
    offset = local.utcoffset()
    minutes = -int(offset.total_seconds() // 60) if offset is not None else 0
    return {
        "iso": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "timestamp": int(now.timestamp() * 1000),
        "timezoneOffset": minutes,
        "localString": local.strftime("%x, %X"),
        "timezoneName": local.tzname() or time.tzname[0],
    }


def status_of(directory: Directory, now: datetime, roles: Sequence[str]) -> dict[str, Any]:
    """Each server's state and the tools of it this user may be offered (the allowlist and
    their roles): never the tools held back, whose names say what the platform can do."""
    offered = [tool for tool in directory.tools() if roles_allow(tool.required_roles, roles)]
    gateway_tools = sorted(tool.display_name for tool in offered if tool.source == "mcp")
    servers = [
        {
            "name": client.config.name,
            "status": "connected" if client.connected else "disconnected",
            "transport": client.config.transport,
            "tools": gateway_tools,
        }
        for client in directory.servers()
    ]
    return {
        "timestamp": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "servers": servers,
        "usageSummary": {"totalRegisteredTools": len(offered)},
    }


def available_to(tools: Sequence[PlatformTool], roles: Sequence[str]) -> dict[str, Any]:
    listed = [
        {
            "name": tool.tool_id,
            "displayName": tool.display_name,
            "source": tool.source,
            "description": tool.spec.description,
            **({"requiredRoles": list(tool.required_roles)} if tool.required_roles else {}),
        }
        for tool in tools
        if roles_allow(tool.required_roles, roles)
    ]
    return {"requesterRoles": list(roles), "availableTools": listed, "count": len(listed)}
