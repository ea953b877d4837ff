"""A local MCP server built with the official SDK, standing in for BitBrat's tool gateway: one
``echo`` tool over HTTP + SSE (the gateway's transport) or Streamable HTTP, behind the gateway's
token check.

It serves from a thread with an event loop of its own, so a measurement on the caller's event
loop thread (``time.thread_time``) counts the caller's work and not the server's. Stdlib,
``mcp`` and ``uvicorn`` only: the worker's own dependencies.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Self

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from llm_bot.platform_tools.servers import Transport
from llm_bot_tools.local.lifecycle import LocalService

STOP_TIMEOUT_S = 10.0


class LocalToolServer(LocalService):
    """``echo(text)`` answers ``echo: <text>`` and counts the call in ``calls``."""

    def __init__(self, token: str, transport: Transport = "sse") -> None:
        self.token, self.transport = token, transport
        self.calls = 0
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The endpoint, as ``MCP_GATEWAY_URL`` names the gateway's."""
        if self._socket is None:
            raise RuntimeError("LocalToolServer has not been started")
        path = "/sse" if self.transport == "sse" else "/mcp"
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}{path}"

    def start(self) -> Self:
        """The socket listens before the thread starts: a client connecting at once is queued,
        not refused."""
        if self._thread is not None:
            raise RuntimeError("LocalToolServer is already running")
        self._socket = _listening_socket()
        config = uvicorn.Config(self._app(), log_level="warning")
        self._server = uvicorn.Server(config)
        server, sockets = self._server, [self._socket]

        async def serve() -> None:
            await server.serve(sockets=sockets)
            # A forced exit skips the app's lifespan shutdown; left pending, its task would be
            # cancelled with the loop, and uvicorn logs that as an error.
            await server.lifespan.shutdown()

        self._thread = threading.Thread(
            target=lambda: asyncio.run(serve()),
            name="local-tool-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """At once, open SSE streams included (they would hold a graceful shutdown)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = self._server.force_exit = True
        self._thread.join(STOP_TIMEOUT_S)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def _app(self) -> ASGIApp:
        mcp = MCPServer("local-tools")

        @mcp.tool()
        async def echo(text: str) -> str:
            """Answer the text (a stand-in for any platform tool)."""
            self.calls += 1
            return f"echo: {text}"

        app = mcp.sse_app() if self.transport == "sse" else mcp.streamable_http_app()
        return TokenCheck(app, self.token)


def _listening_socket() -> socket.socket:
    """A loopback TCP socket made with its protocol named: asyncio sets TCP_NODELAY only on
    sockets whose ``proto`` is ``IPPROTO_TCP``, and the accepted ones inherit it. Without it,
    Nagle's algorithm holds each response's body until the client's delayed ACK of its headers,
    ~40 ms a request."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    return listening


class TokenCheck:
    """The gateway's check (BitBrat src/common/base-server.ts:2096-2112): a request without the
    same ``x-mcp-token`` gets 401; ``on_refused`` lets a test count them."""

    def __init__(
        self, app: ASGIApp, token: str, on_refused: Callable[[], None] = lambda: None
    ) -> None:
        self.app, self.token, self.on_refused = app, token.encode(), on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"x-mcp-token") != self.token:
            self.on_refused()
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"Unauthorized"})
            return
        await self.app(scope, receive, send)
