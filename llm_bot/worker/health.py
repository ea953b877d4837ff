"""Health and metrics endpoints on ``PORT``: Cloud Run probes, ``llm-bot check``, Prometheus.

``/live`` (or ``/healthz``, or BitBrat's ``/livez``) answers from the event loop itself, so a
stuck loop cannot answer it. ``/ready`` (or ``/readyz``) also asks the worker whether it is
subscribed and its database answers. Google's front end reserves some paths ending in ``z``
(``/healthz`` among them), so through ``gcloud run services proxy`` only ``/live`` and
``/ready`` reach the container; the ``z`` names stay for ``llm-bot check`` and probes
elsewhere. ``/metrics`` is the Prometheus exposition of the service's OpenTelemetry metrics. A
few GET routes do not justify a web framework, so this is plain asyncio streams, with every
read bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

logger = logging.getLogger(__name__)

Readiness = Callable[[], Awaitable[tuple[bool, str]]]

_READ_TIMEOUT_S = 5.0
_MAX_HEADER_LINES = 100
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
LIVE_PATHS = ("/live", "/healthz", "/livez")
READY_PATHS = ("/ready", "/readyz")


class HealthServer:
    def __init__(
        self,
        readiness: Readiness,
        port: int,
        host: str = "0.0.0.0",  # noqa: S104 - Cloud Run probes come from outside the container
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._readiness = readiness
        self._registry = registry
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        logger.info("health endpoints on port %s", self._port)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT_S):
                method, path = await _read_request(reader)
                if path == "/metrics" and method == "GET" and self._registry is not None:
                    writer.write(
                        _raw_response(200, generate_latest(self._registry), CONTENT_TYPE_LATEST)
                    )
                else:
                    status, body = await self._route(method, path)
                    writer.write(_response(status, body))
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError) as error:
            logger.debug("health request dropped: %r", error)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(self, method: str, path: str) -> tuple[int, dict[str, object]]:
        if path not in LIVE_PATHS + READY_PATHS:
            return 404, {"error": f"no route {path}"}
        if method != "GET":
            return 405, {"error": f"{method} not allowed"}
        if path in LIVE_PATHS:
            return 200, {"status": "alive"}
        ready, detail = await self._readiness()
        return (200 if ready else 503), {"ready": ready, "detail": detail}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """Method and path of the request line; the headers are read and ignored."""
    request_line = (await reader.readline()).decode("latin-1").split()
    if len(request_line) < 2:
        raise ValueError("malformed request line")
    for _ in range(_MAX_HEADER_LINES):
        if (await reader.readline()) in (b"\r\n", b"\n", b""):
            break
    return request_line[0], request_line[1].split("?", 1)[0]


def _response(status: int, body: dict[str, object]) -> bytes:
    return _raw_response(status, json.dumps(body).encode(), "application/json")


def _raw_response(status: int, payload: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + payload
