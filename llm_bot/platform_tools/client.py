"""One MCP server's connection, kept up in the background on the official ``mcp`` SDK.

The worker never waits for an MCP server: `McpClient.start` returns at once and the
connection comes and goes behind it (connect, list tools, re-list on
``notifications/tools/list_changed``, ping every ``monitor_s``, reconnect with exponential
backoff). A call made while the server is away fails at once with `ToolUnavailable`, so an
event is answered with the built-in tools instead of waiting for a gateway that may not come;
so does a call while the server's circuit is open (`CircuitOpen`, ``breaker.py``): calls to a
server that stopped answering fail at once instead of each waiting for its timeout.

The backoff follows BitBrat's (``src/common/mcp/client-manager.ts:81-87``, see
``llm_bot/platform_tools/servers.py``): base, doubling per failed attempt, at most max, plus up to
20 % of base as jitter; it starts again from base once a connection was up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

import mcp.types as types
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.wait import wait_exponential_jitter

from llm_bot.platform_tools.breaker import CircuitBreaker, Refused
from llm_bot.platform_tools.servers import ServerConfig, gateway_config
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics

logger = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="llm-bot", version="1.0.0")
# Connecting (HTTP, initialize, the first listing) longer than this counts as a failed attempt.
CONNECT_TIMEOUT_S = 10.0
# A listing (at connect and after list_changed): time, pages and tools it may take.
LIST_TIMEOUT_S = 10.0
MAX_LIST_PAGES = 20
MAX_TOOLS = 500


class ToolUnavailable(Exception):
    """The tool's server is not connected (or never was): the call was not sent."""


class CircuitOpen(ToolUnavailable):
    """The server's circuit is open (it stopped answering): the call was not sent. Its text is
    written for the model."""

    def __init__(self, server: str, retry_in_s: float) -> None:
        super().__init__(
            f"The tool server {server!r} stopped answering; its tools are unavailable for now."
        )
        self.server, self.retry_in_s = server, retry_in_s


class McpClient:
    """The live connection to one MCP server and the tools it lists."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        reconnect_base_s: float,
        reconnect_max_s: float,
        monitor_s: float,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.config = config
        self.breaker = breaker or CircuitBreaker(config.name)
        self._base_s, self._max_s, self._monitor_s = reconnect_base_s, reconnect_max_s, monitor_s
        self._session: ClientSession | None = None
        self._tools: dict[str, types.Tool] = {}
        self._connects = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @property
    def connected(self) -> bool:
        return self._session is not None

    @property
    def connects(self) -> int:
        """Connections made so far: a reconnect makes it grow."""
        return self._connects

    def status(self) -> dict[str, object]:
        """What ``/ready``'s detail says of this server: the worker is ready either way."""
        return {"connected": self.connected, "tools": len(self._tools)}

    @property
    def tools(self) -> Mapping[str, types.Tool]:
        """The server's tools by their own name, as last listed (empty while disconnected)."""
        return self._tools

    def start(self) -> None:
        """Keep the connection up in the background until `aclose`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp:{self.config.name}")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_until(self, predicate: Callable[[McpClient], bool], timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until ``predicate`` holds; it is checked on each change."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        meta: Mapping[str, Any],
        timeout_s: float,
        user: str = "",
        full_time: bool = True,
    ) -> types.CallToolResult:
        """Call a tool with ``_meta`` for ``user``; TimeoutError after ``timeout_s`` (at once,
        unsent, when it is not positive), ToolUnavailable when the server is not connected,
        CircuitOpen at once while its circuit (or the user's) is open. A result with
        ``is_error`` is returned, not raised. ``full_time``: ``timeout_s`` is the whole
        configured limit, so a timeout counts against the server (``breaker.py``)."""
        session = self._session
        if session is None:
            raise ToolUnavailable(self.config.name)
        if timeout_s <= 0:
            raise TimeoutError(f"no time left to call {name!r}")
        # _meta is an open map (userRoles, userId); the SDK types only its reserved keys.
        wire_meta = cast(types.RequestParamsMeta, dict(meta))
        try:
            with self.breaker.attempt(user, full_time=full_time):
                async with asyncio.timeout(timeout_s):
                    return await session.call_tool(name, dict(arguments), meta=wire_meta)
        except Refused as refused:
            raise CircuitOpen(refused.server, refused.retry_in_s) from None

    async def _run(self) -> None:
        while True:
            retrying = AsyncRetrying(
                wait=wait_exponential_jitter(
                    multiplier=self._base_s, max=self._max_s, jitter=self._base_s * 0.2
                ),
                retry=retry_if_exception_type(Exception),
                before_sleep=self._log_retry,
            )
            async for attempt in retrying:
                with attempt:
                    await self._serve()

    def _log_retry(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        logger.warning(
            "mcp server unreachable",
            extra={
                "server": self.config.name,
                "attempt": state.attempt_number,
                "retry_in_s": round(state.upcoming_sleep, 3),
                "error": type(error).__name__,
            },
        )

    async def _serve(self) -> None:
        """One connection: raises when it could not be made, returns when a made one ended."""
        lost, relist = asyncio.Event(), asyncio.Event()
        established = False
        try:
            async with self._connect(lost, relist) as session:
                established = True
                await self._attach(session)
                await self._watch(session, lost, relist)
        except Exception as error:
            if not established:
                raise
            logger.warning(
                "mcp server connection lost",
                extra={"server": self.config.name, "error": type(error).__name__},
            )
        finally:
            await self._attach(None)

    @contextlib.asynccontextmanager
    async def _connect(
        self, lost: asyncio.Event, relist: asyncio.Event
    ) -> AsyncIterator[ClientSession]:
        async def on_message(message: IncomingMessage) -> None:
            # Runs in the session's receive loop: a request from here would wait on itself.
            if isinstance(message, Exception):
                lost.set()
            elif isinstance(message, types.ToolListChangedNotification):
                relist.set()

        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=on_message, client_info=CLIENT_INFO)
                )
                await session.initialize()
                self._tools = await _list_tools(session)
            yield session

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        headers = dict(self.config.headers)
        if self.config.transport == "sse":
            return sse_client(self.config.url, headers=headers, timeout=CONNECT_TIMEOUT_S)
        http = create_mcp_http_client(headers=headers)
        stack.push_async_callback(http.aclose)
        return streamable_http_client(self.config.url, http_client=http)

    async def _watch(
        self, session: ClientSession, lost: asyncio.Event, relist: asyncio.Event
    ) -> None:
        """Until the connection is lost: re-list on list_changed, ping when quiet."""
        while not lost.is_set():
            try:
                await asyncio.wait_for(_first(lost, relist), self._monitor_s)
            except TimeoutError:
                async with asyncio.timeout(self._monitor_s):
                    await session.send_ping()
                continue
            if relist.is_set():
                relist.clear()
                self._tools = await _list_tools(session)
                await self._notify()

    async def _attach(self, session: ClientSession | None) -> None:
        if (session is None) != (self._session is None):
            metrics.mcp_connected.add(1 if session else -1, {"server": self.config.name})
        if session is not None:
            self._connects += 1
            logger.info(
                "mcp server connected",
                extra={"server": self.config.name, "tools": len(self._tools)},
            )
        else:
            self._tools = {}
        self._session = session
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


def gateway_client(settings: Settings) -> McpClient | None:
    """The tool-gateway's client from the settings, or None when no gateway is configured."""
    config = gateway_config(settings)
    if config is None:
        return None
    return McpClient(
        config,
        reconnect_base_s=settings.mcp_reconnect_base_ms / 1000,
        reconnect_max_s=settings.mcp_reconnect_max_ms / 1000,
        monitor_s=settings.mcp_reconnect_monitor_ms / 1000,
        breaker=CircuitBreaker.from_settings(config.name, settings),
    )


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _list_tools(session: ClientSession) -> dict[str, types.Tool]:
    """The server's tools by name: every page, within ``LIST_TIMEOUT_S``, at most
    ``MAX_LIST_PAGES`` pages and ``MAX_TOOLS`` tools (a server that pages on and on, or lists
    thousands, gets the tools read so far)."""
    tools: dict[str, types.Tool] = {}
    cursor: str | None = None
    async with asyncio.timeout(LIST_TIMEOUT_S):
        for _ in range(MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.update((tool.name, tool) for tool in page.tools[: MAX_TOOLS - len(tools)])
            cursor = page.next_cursor
            if not cursor or len(tools) >= MAX_TOOLS:
                return tools
    logger.warning("mcp tool listing cut short", extra={"tools": len(tools)})
    return tools
