"""The tools an MCP server lists, as platform tools: BitBrat's ``McpBridge.translateTool``
(``src/common/mcp/bridge.ts:37-110``), with the role check made here too.

- id ``tool_id(server, name)``, the model's name ``model_name(id)``, the description and the
  input schema as listed (a schema that is no object, or of type ``"None"`` as Python servers
  may write for no parameters, becomes an empty object schema, as bridge.ts:41-48 does);
- required roles and scopes from the listing's ``_meta`` (``requiredRoles``, ``scopes``), the
  place MCP keeps for such data. BitBrat's gateway sends ``scopes`` beside the schema, a field
  the SDK drops, and no roles (servers.py), so against it every tool is global and unrestricted
  here, as it is in BitBrat's llm-bot: ``LLM_BOT_TOOLS_ALLOW`` is what holds tools back;
- side effects unless the listing's annotations say ``readOnlyHint``;
- bounded: the description cut to ``MAX_DESCRIPTION_CHARS``; a tool whose model name passes 64
  characters, whose name, roles or scopes hold a NUL, or whose schema is too large or deep is
  not offered (:func:`unfit`);
- the arguments that name a user, a channel or a destination pinned to the event
  (:mod:`llm_bot.platform_tools.subjects`): left out of the schema the model sees, set when bound;
- a call carries ``_meta`` ``{userRoles, userId}`` as BitBrat's (``call_meta``) plus the call's
  ``idempotencyKey``; a caller whose roles the tool does not allow is refused before anything
  is sent (the gateway checks again; BitBrat trusts the gateway alone);
- a result with ``isError``, a timeout, a server away or any failure of the call is an error
  outcome whose text the model reads (BitBrat throws, which its SDK shows the model the same
  way); a result's text parts joined, else its content as JSON (bridge.ts:78-95).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp.types as types

from llm_bot.llm.messages import ToolSpec
from llm_bot.platform_tools.calls import ToolOutcome
from llm_bot.platform_tools.client import McpClient, ToolUnavailable
from llm_bot.platform_tools.platform import Caller, ToolRequest, roles_allow
from llm_bot.platform_tools.servers import call_meta, model_name, tool_id
from llm_bot.platform_tools.subjects import Subjects, model_schema, pinned, subjects_of
from llm_bot.text import UNSTORABLE, capped

logger = logging.getLogger(__name__)

IDEMPOTENCY_KEY = "idempotencyKey"  # in _meta, beside BitBrat's userRoles and userId
# Bounds on what a listing puts before the model: OpenAI's tool names are ^[a-zA-Z0-9_-]{1,64}$;
# a description is read by the model on every request; a schema is sent on every request.
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_SCHEMA_CHARS = 8192
MAX_SCHEMA_DEPTH = 10


@dataclass(frozen=True)
class GatewayTool:
    """One listed tool of ``client``'s server."""

    client: McpClient
    name: str  # the server's own name, which calls use
    tool_id: str
    spec: ToolSpec
    required_roles: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    side_effects: bool = True
    subjects: Subjects = field(default_factory=Subjects)

    source = "mcp"

    @property
    def display_name(self) -> str:
        return self.name

    def bind(self, arguments: Mapping[str, Any], caller: Caller) -> dict[str, Any] | str:
        bound = pinned(arguments, self.subjects, caller)
        return bound if isinstance(bound, dict) else f"error: {self.spec.name}: {bound}"

    async def call(self, arguments: Mapping[str, Any], request: ToolRequest) -> ToolOutcome:
        caller = request.caller
        if not roles_allow(self.required_roles, caller.roles):
            return ToolOutcome(f"error: {self.spec.name} is not allowed for this user", True)
        meta = {
            **call_meta(caller.user_id, caller.roles),
            IDEMPOTENCY_KEY: request.key.idempotency_key(),
        }
        try:
            result = await self.client.call(
                self.name,
                arguments,
                meta=meta,
                timeout_s=request.timeout_s,
                user=caller.user_id or "",
                full_time=request.full_time,
            )
        except TimeoutError:
            return ToolOutcome(f"error: {self.spec.name} timed out", True)
        except ToolUnavailable:
            return ToolOutcome(f"error: {self.spec.name} is unavailable right now", True)
        except Exception as error:  # a protocol or transport failure answers the model
            # The type alone: a server's error text may quote the arguments.
            logger.warning(
                "tool call failed", extra={"tool": self.tool_id, "cause": type(error).__name__}
            )
            return ToolOutcome(f"error: {self.spec.name} failed: {type(error).__name__}", True)
        text = result_text(result)
        return ToolOutcome(f"error: {text}" if result.is_error else text, result.is_error)


def gateway_tools(client: McpClient) -> list[GatewayTool]:
    """The server's tools as last listed (none while it is away), but those the model cannot
    be offered (:func:`unfit`)."""
    tools = []
    for tool in client.tools.values():
        made = listed(client, tool)
        reason = unfit(made)
        if reason is None:
            tools.append(made)
        else:
            logger.warning("tool not offered", extra={"tool": made.tool_id[:200], "reason": reason})
    return tools


def unfit(tool: GatewayTool) -> str | None:
    """Why a listed tool is not offered: a name past what providers accept (one such name makes
    them refuse every request that offers it); a name, role or scope holding a NUL (the id is
    stored with each call, the id and a scope are published in ``errors[]`` and annotations, and
    neither takes one); or a schema too large or too deep, which would cost every request its
    size and every reader its depth."""
    if len(tool.spec.name) > MAX_NAME_CHARS:
        return f"name longer than {MAX_NAME_CHARS} characters"
    if any(UNSTORABLE.search(text) for text in (tool.tool_id, *tool.required_roles, *tool.scopes)):
        return "name, roles or scopes hold a character that cannot be stored"
    if len(json.dumps(tool.spec.parameters)) > MAX_SCHEMA_CHARS:
        return f"schema larger than {MAX_SCHEMA_CHARS} characters"
    if _depth(tool.spec.parameters) > MAX_SCHEMA_DEPTH:
        return f"schema nested deeper than {MAX_SCHEMA_DEPTH} levels"
    return None


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def listed(client: McpClient, tool: types.Tool) -> GatewayTool:
    identity = tool_id(client.config.name, tool.name)
    meta = tool.meta or {}
    read_only = tool.annotations is not None and tool.annotations.read_only_hint is True
    schema = object_schema(tool)
    subjects = subjects_of(identity, schema)
    return GatewayTool(
        client=client,
        name=tool.name,
        tool_id=identity,
        spec=ToolSpec(
            model_name(identity),
            capped(tool.description or "", MAX_DESCRIPTION_CHARS),
            model_schema(schema, subjects),
        ),
        required_roles=_texts(meta.get("requiredRoles")),
        scopes=_texts(meta.get("scopes")),
        side_effects=not read_only,
        subjects=subjects,
    )


def object_schema(tool: types.Tool) -> dict[str, Any]:
    schema = tool.input_schema
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    if schema.get("type") == "None":
        return {**schema, "type": "object", "properties": schema.get("properties") or {}}
    return dict(schema)


def result_text(result: types.CallToolResult) -> str:
    texts = [part.text for part in result.content if isinstance(part, types.TextContent)]
    joined = "\n".join(texts).strip()
    if joined:
        return joined
    return json.dumps([part.model_dump(mode="json", by_alias=True) for part in result.content])


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)
