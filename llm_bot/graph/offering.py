"""Which tools one event offers the model: the memory tools and the platform tools (built-ins
and the gateway's allowed tools) that pass BitBrat's three filters, in its order
(``processor.ts:756-811``):

1. roles: a platform tool with required roles needs the requesting user to hold one of them;
   one that fails is left out silently (BitBrat logs it at debug level only);
2. scope: with ``metadata.scope`` set, a platform tool that lists scopes must list it; one that
   fails is recorded in ``scopeSuppressed``;
3. the behaviour profile (:func:`llm_bot.graph.behavior.annotations.tool_use`, by tool id): a
   tool it holds back is recorded in ``suppressed`` with BitBrat's reason.

The memory tools have no roles or scopes (they act for the requesting user alone) and are
named by their model name. The offer is made once per event, at its first model call, from the
platform tools listed at that moment; every later round and the tool runner use that offer,
so a listing that changes mid-run neither adds a tool nor moves a name.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from llm_bot.events.models import InternalEventV2
from llm_bot.graph.behavior.annotations import ToolUse, tool_use
from llm_bot.graph.behavior.profile import Profile
from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.tools import MemoryTool
from llm_bot.platform_tools.platform import (
    Caller,
    PlatformTool,
    caller_of,
    requested_scope,
    roles_allow,
    scope_allows,
)

logger = logging.getLogger(__name__)

# The most tools one request may offer: OpenAI refuses a request with more ("array too long"),
# so a gateway listing more that the allowlist passes (``mcp:*``) would fail every event as
# LLM_REQUEST_INVALID. The memory tools come first, then the platform tools in listing order.
MAX_OFFERED_TOOLS = 128


@dataclass(frozen=True)
class Offer:
    """The tools offered for one event by the name the model calls them, for whom, and what
    the filters held back."""

    caller: Caller
    use: ToolUse
    memory: dict[str, MemoryTool] = field(default_factory=dict)
    platform: dict[str, PlatformTool] = field(default_factory=dict)

    @property
    def specs(self) -> list[ToolSpec]:
        memory = [tool.spec for tool in self.memory.values()]
        return [*memory, *(tool.spec for tool in self.platform.values())]

    @property
    def names(self) -> list[str]:
        return [*self.memory, *self.platform]


def make_offer(
    event: InternalEventV2,
    profile: Profile,
    memory_tools: Sequence[MemoryTool],
    platform_tools: Sequence[PlatformTool],
    filter_enabled: bool,
) -> Offer:
    caller, scope = caller_of(event), requested_scope(event)
    permitted = [tool for tool in platform_tools if roles_allow(tool.required_roles, caller.roles)]
    if len(permitted) < len(platform_tools):
        logger.debug(
            "tools filtered by roles",
            extra={"tools": len(platform_tools) - len(permitted), "userRoles": caller.roles},
        )
    in_scope = [tool for tool in permitted if scope_allows(tool.scopes, scope)]
    scope_suppressed = tuple(
        (tool.tool_id, _scope_reason(scope, tool.scopes))
        for tool in permitted
        if not scope_allows(tool.scopes, scope)
    )
    names = [*(tool.spec.name for tool in memory_tools), *(tool.tool_id for tool in in_scope)]
    use = tool_use(profile, names, filter_enabled, scope_suppressed)
    allowed = set(use.allowed)
    memory = {tool.spec.name: tool for tool in memory_tools if tool.spec.name in allowed}
    platform: dict[str, PlatformTool] = {}
    for tool in in_scope:
        if tool.tool_id not in allowed:
            continue
        if tool.spec.name in memory or tool.spec.name in platform:
            logger.warning("tool name offered twice; the first kept", extra={"tool": tool.tool_id})
            continue
        if len(memory) + len(platform) == MAX_OFFERED_TOOLS:
            _warn_of_tools_left_out(len(memory) + len(in_scope))
            break
        platform[tool.spec.name] = tool
    return Offer(caller, use, memory, platform)


@functools.lru_cache(maxsize=8)
def _warn_of_tools_left_out(passing: int) -> None:
    """Once per process for each number of tools the filters pass, not once per event."""
    logger.warning(
        "more tools pass the filters than a model request may offer; the first are offered",
        extra={"tools": passing, "offered": MAX_OFFERED_TOOLS},
    )


def _scope_reason(requested: str | None, scopes: Sequence[str]) -> str:
    """BitBrat's text (processor.ts:807)."""
    return f"mismatched scope (requested: {requested}, tool: {','.join(scopes)})"
