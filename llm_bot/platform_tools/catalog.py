"""The platform tools there are for an event: the built-ins, then the gateway's tools that
``LLM_BOT_TOOLS_ALLOW`` lets through, as the gateway lists them at that moment.

Read once per event (:meth:`ToolCatalog.tools`), so a ``tools/list_changed`` is picked up by
the next event and one event sees one listing. The gateway's tools are translated again only
when its listing changed (the client replaces its map on each listing), so an event pays a
lookup, not a translation. The allowlist holds back gateway tools only: the built-ins read and
change nothing, and the memory tools are llm-bot's own. A tool whose subject cannot be pinned to
the caller (:data:`llm_bot.platform_tools.subjects.UNPINNABLE`) passes only when a pattern is its
exact id: ``mcp:*`` offers every tool that acts for the requester alone, and no tool that reads or
writes any user's data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from fnmatch import fnmatchcase

import mcp.types as types

from llm_bot.clock import utc_now
from llm_bot.platform_tools.builtins import BuiltinTool, builtin_tools
from llm_bot.platform_tools.client import McpClient
from llm_bot.platform_tools.gateway import GatewayTool, gateway_tools
from llm_bot.platform_tools.platform import PlatformTool


def allowlist(patterns: str) -> tuple[str, ...]:
    """``LLM_BOT_TOOLS_ALLOW``'s comma-separated glob patterns, blanks dropped."""
    return tuple(pattern.strip() for pattern in patterns.split(",") if pattern.strip())


def allowed(tool_id: str, patterns: Iterable[str], *, pinnable: bool = True) -> bool:
    """Whether a tool id matches one of the patterns (``fnmatch``, case-sensitive, as ids are);
    a tool whose subject cannot be pinned, only when a pattern is its id."""
    if not pinnable:
        return tool_id in patterns
    return any(fnmatchcase(tool_id, pattern) for pattern in patterns)


class ToolCatalog:
    """The built-ins and one optional MCP server's allowed tools (the tool-gateway)."""

    def __init__(
        self,
        gateway: McpClient | None,
        allow: Sequence[str],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._gateway = gateway
        self._allow = tuple(allow)
        self._builtins: tuple[BuiltinTool, ...] = builtin_tools(self, clock)
        self._listing: Mapping[str, types.Tool] | None = None
        self._listed: tuple[GatewayTool, ...] = ()

    def servers(self) -> Sequence[McpClient]:
        return () if self._gateway is None else (self._gateway,)

    def tools(self) -> Sequence[PlatformTool]:
        return (*self._builtins, *self._gateway_tools())

    def _gateway_tools(self) -> tuple[GatewayTool, ...]:
        if self._gateway is None:
            return ()
        listing = self._gateway.tools
        if listing is not self._listing:
            tools = gateway_tools(self._gateway)
            self._listed = tuple(
                tool
                for tool in tools
                if allowed(tool.tool_id, self._allow, pinnable=tool.subjects.pinnable)
            )
            self._listing = listing
        return self._listed
