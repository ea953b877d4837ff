"""One call of a platform tool (built-in or MCP): its key in the event's run, its outcome, and
the ledger that makes a call with side effects happen once.

Pub/Sub redelivers, and a retried event runs its graph again: the model asks for the same
calls, in the same order. A :class:`CallKey` names a call by the event (correlation id and
routing step, the key of ``processed_events``) and the call's index in the run, so the second
run finds what the first one did. The index counts every platform-tool call of the run across
its rounds, in the order the model asked for them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class CallKey:
    """``user_id`` is the graph's user (the owner of the record, for erasure), not the id sent
    to the gateway."""

    user_id: str
    correlation_id: str
    step_key: str
    call_index: int

    def idempotency_key(self) -> str:
        """Sent in the call's ``_meta``, so a server that keeps keys can refuse a repeat."""
        return f"{self.correlation_id}:{self.step_key}:{self.call_index}"


@dataclass(frozen=True)
class ToolOutcome:
    """What the model is shown for a call, and whether it is an error (a failed or timed-out
    call, a refusal): an error is also recorded on the event's ``errors[]``."""

    text: str
    is_error: bool = False


class ToolLedger(Protocol):
    """Runs ``call`` once per key: a key already recorded answers its recorded outcome."""

    async def once(
        self,
        key: CallKey,
        tool_id: str,
        arguments: Mapping[str, Any],
        call: Callable[[], Awaitable[ToolOutcome]],
    ) -> ToolOutcome: ...


class NoLedger:
    """Without a database (``send --local``): every call is made; nothing is recorded."""

    async def once(
        self,
        key: CallKey,
        tool_id: str,
        arguments: Mapping[str, Any],
        call: Callable[[], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        return await call()
