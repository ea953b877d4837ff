"""A circuit breaker per MCP server: a server that stopped answering fails its calls at once.

A tool call may take ``LLM_BOT_TOOL_TIMEOUT_MS``; a server that hangs would cost every event
that long, each inside its deadline. As BitBrat's ``ProxyInvoker`` does
(``src/common/mcp/proxy-invoker.ts:43-45,124-150,208-213``, see ``servers.py``),
``MCP_CIRCUIT_FAILURE_THRESHOLD`` (2) failures in a row open the server's circuit; while it is
open its calls fail at once, without being sent; ``MCP_CIRCUIT_RESET_TIMEOUT_MS`` (120 s) after
it opened, the circuit is half-open and a call goes through: an answer closes it, another
failure opens it again for the whole timeout.

Where it differs from BitBrat, and why:

- **A failure is a call that got no answer**: it timed out, or its connection failed (the
  SDK's ``CONNECTION_CLOSED`` and ``REQUEST_TIMEOUT``, a transport error). BitBrat also counts
  an error the server answers (an ``isError`` result, a JSON-RPC error such as the gateway's
  ``Forbidden``). Such an answer comes back at once, so failing fast saves nothing, and a user
  can cause one at will (a forbidden tool, bad arguments): on the gateway, which serves every
  platform tool, counting it would let one user turn all tools off for everyone.
- **Half-open lets one call through** (the probe); the others fail at once until it is
  answered. BitBrat lets every call through while half-open, so a still-hanging server holds
  all of them for the full timeout again. A probe that ends without a verdict (cancelled with
  its event) hands the probe to the next call.
- A call not sent because the server is not connected is no failure: it costs no time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Literal

import mcp.types as types
from mcp.shared.exceptions import MCPError

from llm_bot.clock import Ticks, monotonic
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics

logger = logging.getLogger(__name__)

State = Literal["closed", "open", "half-open"]
# answered: the server answered (an error answer too); unanswered: a failure; abandoned: the
# call ended without telling (cancelled).
Verdict = Literal["answered", "unanswered", "abandoned"]

_NO_ANSWER_CODES = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})
_DEFAULTS = Settings.model_fields


class Refused(Exception):
    """The circuit is open: the call was not sent. ``retry_in_s``: until a call may try the
    server (0.0 while another call is trying it)."""

    def __init__(self, server: str, retry_in_s: float) -> None:
        super().__init__(server, retry_in_s)
        self.server, self.retry_in_s = server, retry_in_s


def verdict_of(error: Exception) -> Verdict:
    """What a call that raised ``error`` says of its server: a JSON-RPC error is an answer."""
    if isinstance(error, MCPError) and error.code not in _NO_ANSWER_CODES:
        return "answered"
    return "unanswered"


class CircuitBreaker:
    """One server's circuit. Not thread-safe: it lives on the worker's event loop."""

    def __init__(
        self,
        server: str,
        *,
        threshold: int = _DEFAULTS["mcp_circuit_failure_threshold"].default,
        reset_timeout_s: float = _DEFAULTS["mcp_circuit_reset_timeout_ms"].default / 1000,
        clock: Ticks = monotonic,
    ) -> None:
        self.server = server
        self._threshold, self._reset_s, self._clock = threshold, reset_timeout_s, clock
        self._failures = 0
        self._opened_at = 0.0
        self._state: State = "closed"
        self._probing = False

    @classmethod
    def from_settings(
        cls, server: str, settings: Settings, clock: Ticks = monotonic
    ) -> CircuitBreaker:
        return cls(
            server,
            threshold=settings.mcp_circuit_failure_threshold,
            reset_timeout_s=settings.mcp_circuit_reset_timeout_ms / 1000,
            clock=clock,
        )

    @property
    def state(self) -> State:
        return self._state

    @contextlib.contextmanager
    def attempt(self) -> Iterator[None]:
        """Around one call: raises `Refused` at once while the circuit is open (or another call
        probes it), and records how the call ended."""
        probe = self._admit()
        verdict: Verdict = "abandoned"
        try:
            yield
            verdict = "answered"
        except Exception as error:
            verdict = verdict_of(error)
            raise
        finally:
            self._settle(verdict, probe)

    def _admit(self) -> bool:
        """Whether the admitted call is the probe."""
        if self._state == "closed":
            return False
        if self._state == "open":
            left = self._opened_at + self._reset_s - self._clock()
            if left > 0:
                raise Refused(self.server, left)
            self._state = "half-open"
        if self._probing:
            raise Refused(self.server, 0.0)
        self._probing = True
        return True

    def _settle(self, verdict: Verdict, probe: bool) -> None:
        if probe:
            self._probing = False
        if verdict == "answered":
            self._failures = 0
            if self._state != "closed":
                self._close()
        elif verdict == "unanswered":
            self._failures += 1
            if self._state != "closed" or self._failures >= self._threshold:
                self._open()
        elif probe:  # abandoned: the next call probes
            self._state, self._opened_at = "open", self._clock() - self._reset_s

    def _open(self) -> None:
        if self._state == "closed":
            metrics.mcp_circuit_open.add(1, {"server": self.server})
            logger.warning(
                "mcp circuit open: calls fail at once",
                extra={"server": self.server, "failures": self._failures, "for_s": self._reset_s},
            )
        self._state, self._opened_at = "open", self._clock()

    def _close(self) -> None:
        metrics.mcp_circuit_open.add(-1, {"server": self.server})
        logger.info("mcp circuit closed", extra={"server": self.server})
        self._state = "closed"
