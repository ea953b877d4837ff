"""Which MCP servers the worker connects to, and what it sends them, as BitBrat's llm-bot does.

What BitBrat does (cnavta/BitBrat at the mirrored HEAD):

- The gateway's address is ``MCP_GATEWAY_URL``, its SSE endpoint
  (``src/common/profiles/mcp-client-profile.ts:47,58``; ``env/local/global.yaml:10`` sets
  ``http://tool-gateway.bitbrat.local:3000/sse``). Unset, llm-bot connects to no gateway.
- llm-bot connects over the legacy HTTP + SSE transport (``transport: 'sse'``,
  ``mcp-client-profile.ts:63``; ``SSEClientTransport`` with the headers as ``requestInit``,
  ``src/common/mcp/client-manager.ts:240-243``): ``GET /sse`` opens the stream and
  ``POST /message?sessionId=`` carries requests (``src/common/base-server.ts:2118,2153``).
- Two headers on every request (``mcp-client-profile.ts:65-68``): ``x-mcp-token`` from
  ``MCP_AUTH_TOKEN`` and ``x-agent-name`` with the service's name, ``llm-bot``. The gateway
  answers 401 when ``MCP_AUTH_TOKEN`` is set on its side and the token (``x-mcp-token``, a
  ``?token=`` query or ``Authorization: Bearer``) differs (``base-server.ts:2096-2112``).
- ``x-agent-name: llm-bot`` makes discovery trusted: the gateway lists every tool to llm-bot
  unfiltered (``src/apps/tool-gateway.ts:1004``), with ``name`` = the tool's id (which may hold
  dots, e.g. ``agent.sendProgressUpdate``), ``description``, ``inputSchema`` and ``scopes``
  (``tool-gateway.ts:1036-1041``); llm-bot filters by roles and scope itself
  (``src/services/llm-bot/processor.ts:756-811``).
- Each call carries the requesting user in ``_meta``: ``{userRoles: string[], userId}``
  (``src/common/mcp/bridge.ts:70``, ``src/common/mcp/proxy-invoker.ts:58``); userId is
  ``platform:id`` (e.g. ``twitch:123``), from ``identity.user`` or ``identity.external``
  (``processor.ts:747-748``). The gateway prefers ``_meta`` over ``x-roles``/``x-user-id``
  headers and checks the roles again at call time (``tool-gateway.ts:1111-1116,1234-1265``).
- A listed tool's id is ``mcp:<name>``, or ``mcp:<server>/<name>`` for the platform tools
  every service has (``bit`` and ``bit.*``), a name already starting ``mcp:`` or ``internal:``
  kept (``src/common/mcp/bridge.ts:23-35``). The model sees that id with every character
  outside ``[a-zA-Z0-9_-]`` replaced by ``_`` (``src/services/llm-bot/tools/registry.ts:101``),
  e.g. ``mcp_create_schedule``, mapped back by that sanitised name (``registry.ts:108-114``).
- Roles: llm-bot's gateway connection names no ``requiredRoles`` (``mcp-client-profile.ts:61-69``),
  so every gateway tool passes llm-bot's role filter (``processor.ts:763-765``) and the roles are
  checked only by the gateway at call time (``tool-gateway.ts:1116``); its listing carries no
  roles. ``scopes`` is a field outside the MCP schema, which the Python SDK's ``Tool`` drops.
- On ``notifications/tools/list_changed`` (the gateway broadcasts it to every session when a
  service registers or leaves, ``tool-gateway.ts:687-725``) llm-bot re-lists after a 500 ms
  debounce (``client-manager.ts:465-521``, ``MCP_NOTIFICATION_DEBOUNCE_MS``).
- Reconnect: ``MCP_RECONNECT_BASE_MS`` (1000) * 2^(attempt-1), at most ``MCP_RECONNECT_MAX_MS``
  (15000), +-20 % jitter (``client-manager.ts:81-87``), and a monitor every
  ``MCP_RECONNECT_MONITOR_MS`` (5000) that reconnects a server not connected
  (``client-manager.ts:46-60``). One call's timeout is 60 s and two consecutive failures open
  a per-server circuit for 120 s (``proxy-invoker.ts:43-45,124-150,208-213``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llm_bot.settings import Settings

GATEWAY = "tool-gateway"
# The gateway lists every tool, unfiltered, to this agent name (tool-gateway.ts:1004); it is
# the service's name in BitBrat, not LLM_BOT_AGENT_NAME (whose notes document is used).
AGENT_NAME = "llm-bot"

Transport = Literal["sse", "streamable-http"]


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: how to reach it and the headers every request carries."""

    name: str
    url: str
    transport: Transport
    headers: Mapping[str, str] = field(default_factory=dict)


def gateway_config(settings: Settings) -> ServerConfig | None:
    """The tool-gateway as BitBrat's llm-bot reaches it, or None when no gateway is configured."""
    url = (settings.mcp_gateway_url or "").strip()
    if not url:
        return None
    token = settings.mcp_auth_token.get_secret_value() if settings.mcp_auth_token else ""
    headers = {"x-mcp-token": token, "x-agent-name": AGENT_NAME}
    transport = settings.mcp_gateway_transport
    return ServerConfig(name=GATEWAY, url=url, transport=transport, headers=headers)


def call_meta(user_id: str | None, roles: Sequence[str]) -> dict[str, Any]:
    """A call's ``_meta`` as BitBrat sends it: the requesting user's roles and id."""
    meta: dict[str, Any] = {"userRoles": list(roles)}
    if user_id:
        meta["userId"] = user_id
    return meta


_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def tool_id(server: str, name: str) -> str:
    """BitBrat's id of a listed tool (bridge.ts:23-35); ``errors[]`` names it as its source."""
    if name.startswith(("mcp:", "internal:")):
        return name
    if name == "bit" or name.startswith("bit."):
        return f"mcp:{server}/{name}"
    return f"mcp:{name}"


def model_name(tool_id: str) -> str:
    """The name the model sees for a tool id (registry.ts:101): providers accept only these."""
    return _UNSAFE.sub("_", tool_id)
