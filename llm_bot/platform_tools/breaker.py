"""A circuit breaker per MCP server: a server that stopped answering fails its calls at once.

A tool call may take ``LLM_BOT_TOOL_TIMEOUT_MS``; a server that hangs would cost every event
that long, each inside its deadline. As BitBrat's ``ProxyInvoker`` does
(``src/common/mcp/proxy-invoker.ts:43-45,124-150,208-213``, see ``servers.py``),
``MCP_CIRCUIT_FAILURE_THRESHOLD`` (2) failures in a row open the server's circuit; while it is
open its calls fail at once, without being sent; ``MCP_CIRCUIT_RESET_TIMEOUT_MS`` (120 s) after
it opened, the circuit is half-open and a call goes through: an answer closes it, another
failure opens it again for the whole timeout.

Where it differs from BitBrat, and why:

- **A failure is a call that got no answer in its full time**: it timed out after the whole
  ``LLM_BOT_TOOL_TIMEOUT_MS``, or its request failed (the SDK's ``REQUEST_TIMEOUT``, a
  transport error). A call whose limit the event's deadline cut short and that timed out says
  nothing of the server: it counts neither way. BitBrat also counts an error the server
  answers (an ``isError`` result, a JSON-RPC error such as the gateway's ``Forbidden``). Such
  an answer comes back at once, so failing fast saves nothing, and a user can cause one at will
  (a forbidden tool, bad arguments).
- **A call whose connection was lost under it counts for nothing** (the SDK's
  ``CONNECTION_CLOSED``): every call in flight fails with the connection, whoever's it was and
  whatever lost it (one user's result past the SDK's 1 MiB message limit ends the SSE stream),
  so counting them would let one user's call open the circuit for everyone. The client
  connects again, and while it is away calls fail at once, costing no time.
- **One user's failures open that user's circuit, not everyone's.** The gateway serves every
  platform tool, and a user can make calls time out at will ("summarize the stream, then draw
  it"): a slow call says as much about what was asked as about the server. So each user has
  the failure budget BitBrat gives the server: ``threshold`` unanswered calls in a row open
  the circuit for that user alone, for the reset timeout, and their next call after it tries
  again. The server's circuit, for everyone, opens when the calls in a row that got no answer
  came from ``threshold`` different users (at least two): a server that is down fails
  everyone's calls, so it is found as soon as that many users tried, while no single user can
  switch the tools off for the others. A budget per tool would not do: the user picks the
  tool too. The users followed are bounded (:data:`MAX_USERS`, the least recent forgotten
  first).
- **Half-open lets one call through** (the probe); the others fail at once until it is
  answered. BitBrat lets every call through while half-open, so a still-hanging server holds
  all of them for the full timeout again. A probe that ends without a verdict (cancelled with
  its event, or cut short) hands the probe to the next call.
- A call not sent because the server is not connected is no failure: it costs no time.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import mcp.types as types
from mcp.shared.exceptions import MCPError

from llm_bot.clock import Ticks, monotonic
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics

logger = logging.getLogger(__name__)

State = Literal["closed", "open", "half-open"]
# answered: the server answered (an error answer too); unanswered: a failure; abandoned: the
# call ended without telling (cancelled, its connection lost, or timed out within a limit
# shorter than the full one).
Verdict = Literal["answered", "unanswered", "abandoned"]
# Users whose failures are followed at once; beyond it the least recent is forgotten (its
# budget starts again: at worst it costs that user `threshold` more timeouts).
MAX_USERS = 10_000

_DEFAULTS = Settings.model_fields


class Refused(Exception):
    """The circuit is open: the call was not sent. ``retry_in_s``: until a call may try the
    server (0.0 while another call is trying it)."""

    def __init__(self, server: str, retry_in_s: float) -> None:
        super().__init__(server, retry_in_s)
        self.server, self.retry_in_s = server, retry_in_s


def verdict_of(error: Exception, full_time: bool = True) -> Verdict:
    """What a call that raised ``error`` says of its server: a JSON-RPC error is an answer; a
    lost connection, or a timeout within a limit shorter than the full one, nothing."""
    if isinstance(error, MCPError) and error.code == types.CONNECTION_CLOSED:
        return "abandoned"
    if isinstance(error, MCPError) and error.code != types.REQUEST_TIMEOUT:
        return "answered"
    if isinstance(error, TimeoutError) and not full_time:
        return "abandoned"
    return "unanswered"


@dataclass
class _Budget:
    """One user's unanswered calls in a row, and when that opened their circuit (or None)."""

    failures: int = 0
    opened_at: float | None = None


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
        self._failing_users: set[str] = set()  # whose calls make up the failures in a row
        self._opened_at = 0.0
        self._state: State = "closed"
        self._probing = False
        self._users: OrderedDict[str, _Budget] = OrderedDict()

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
    def attempt(self, user: str = "", *, full_time: bool = True) -> Iterator[None]:
        """Around one call of ``user``'s within a limit (``full_time``: the whole configured
        one): raises `Refused` at once while the server's circuit or the user's is open (or
        another call probes it), and records how the call ended."""
        self._admit_user(user)
        probe = self._admit()
        verdict: Verdict = "abandoned"
        try:
            yield
            verdict = "answered"
        except Exception as error:
            verdict = verdict_of(error, full_time)
            raise
        finally:
            self._settle(verdict, probe, user)

    def _admit_user(self, user: str) -> None:
        budget = self._users.get(user)
        if budget is None or budget.opened_at is None:
            return
        left = budget.opened_at + self._reset_s - self._clock()
        if left > 0:
            raise Refused(self.server, left)

    def _budget(self, user: str) -> _Budget:
        budget = self._users.pop(user, None) or _Budget()
        self._users[user] = budget  # the most recent last
        while len(self._users) > MAX_USERS:
            self._users.popitem(last=False)
        return budget

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

    def _settle(self, verdict: Verdict, probe: bool, user: str) -> None:
        if probe:
            self._probing = False
        if verdict == "answered":
            self._users.pop(user, None)
            self._failures = 0
            self._failing_users.clear()
            if self._state != "closed":
                self._close()
        elif verdict == "unanswered":
            self._fail_user(user)
            self._failures += 1
            self._failing_users.add(user)
            users = len(self._failing_users)
            enough = self._failures >= self._threshold and users >= max(2, self._threshold)
            if self._state != "closed" or enough:
                self._open()
        elif probe:  # abandoned: the next call probes
            self._state, self._opened_at = "open", self._clock() - self._reset_s

    def _fail_user(self, user: str) -> None:
        budget = self._budget(user)
        budget.failures += 1
        if budget.failures >= self._threshold:
            if budget.opened_at is None:
                logger.warning(
                    "mcp circuit open for one user: their calls fail at once",
                    extra={"server": self.server, "failures": budget.failures},
                )
            budget.opened_at = self._clock()

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
