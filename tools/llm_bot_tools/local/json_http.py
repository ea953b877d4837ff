"""JSON over HTTP on loopback, stdlib only: each request goes to one answer function.

What the local model server needs of an HTTP server beyond ``http.server``: keep-alive
connections that ``stop()`` can cut (the client holds them open), no traceback for a client
that gave up, no access log, and no answer at all when the function says so (a hung call).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


# (method, path, lowercased headers, raw body) -> the answer, or None to close without one.
AnswerFunction = Callable[[str, str, dict[str, str], bytes], Answer | None]


class JsonHTTPServer(ThreadingHTTPServer):
    """Tracks live connections so stop() can close keep-alive sockets the client still holds."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], answer: AnswerFunction, on_failure: Answer
    ) -> None:
        super().__init__(address, _Handler)
        self.answer = answer
        self.on_failure = on_failure
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """A client that gave up (timeout, test teardown) is normal here, not worth a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        logger.exception("local model server failed on a request from %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; avoid a 40 ms stall
    server: JsonHTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    do_PUT = do_DELETE = do_PATCH = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: test output should show the test's logs, not an access log."""

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        headers = {key.lower(): value for key, value in self.headers.items()}
        try:
            answer = self.server.answer(self.command, self.path, headers, raw)
        except Exception:
            logger.exception("local model server failed on %s %s", self.command, self.path)
            answer = self.server.on_failure
        if answer is None:
            self.close_connection = True
            return
        payload = json.dumps(answer.body).encode()
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in answer.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
