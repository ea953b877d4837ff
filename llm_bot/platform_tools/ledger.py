"""The once-only ledger of platform-tool calls: a retried event answers what its first run got.

Pub/Sub redelivers, and an event whose worker died runs its graph again; a tool with a side
effect (``ban_user``, ``create_schedule``) must not act twice. Each call is a row of
``tool_calls`` keyed by :class:`~llm_bot.platform_tools.calls.CallKey` (user, event, routing step,
call index). The row is written as ``started`` *before* the call is sent and as ``done`` with the
outcome after, each in its own short transaction on the pool, not in the event's final commit:
the record must outlive a crash that comes before that commit.

What :meth:`PostgresToolLedger.once` does with a key:

- no row: claim it (``started``, one attempt), send the call, record the outcome;
- ``done``: answer the recorded outcome, without sending;
- ``started`` while its hold lasts (the tool's timeout and a margin from when it was sent): its
  sender may be waiting for the answer right now (two holders of one event, or two tasks),
  so wait for the outcome;
- ``started`` after its hold, sent once: its sender stopped between sending and recording.
  Send it **once more**, with the same key, so the same idempotency key travels in ``_meta``
  (a server that keeps keys refuses the repeat), and record that;
- ``started`` after its hold, sent twice: do not send; answer an error saying the result is
  unknown.

**The guarantee.** A call is sent at most twice, ever, whatever crashes or redeliveries come;
the second send happens only when a worker stopped (crashed, was killed, or its event was
cancelled at its deadline) after writing the call's ``started`` row and before writing its
outcome: that is, while the request was in flight or between the server's answer and the
record. A server that keeps the idempotency key turns that repeat into a refusal, so for it
the side effect happens once. A call whose outcome was recorded is never sent again; a call
that could not be recorded as started is not sent at all (the failure is raised); an outcome
that could not be recorded (the database went away meanwhile) is still answered, and the call
stays started, within the one repeat. ``call`` answers its failures as outcomes; one that
raises leaves the call started, as a crash would.

**A different call at a recorded index is never sent.** A retried model may ask for other
arguments, or another tool, at call index *i* (sampling, or a conversation that moved on).
The safe reading for side effects is that index *i* was already executed: the recorded
outcome is answered as an error that says the call was made earlier as recorded and is not
made again, with what it answered; a started one is not repeated. A retry then never makes
more calls than the first run did at the same positions, and the model learns what happened.

Times come from ``clock`` and travel as statement parameters: the database's clock is never
read, so statements stay free of volatile functions (a table sharded by user must not have
them in ``ON CONFLICT``/``UPDATE``). A stored text holds no NUL or lone surrogate, which
Postgres refuses: the outcome and arguments are made storable first (:mod:`llm_bot.text`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from llm_bot.clock import utc_now
from llm_bot.db.rows import Rows
from llm_bot.events.inbound import EventKey
from llm_bot.platform_tools.calls import CallKey, ToolOutcome
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics
from llm_bot.text import storable

logger = logging.getLogger(__name__)

MAX_SENDS = 2
# Beyond the tool's own timeout, the time its sender may take to write the outcome (a free
# connection of the ledger pool is waited for no longer than this, llm_bot/db/pools.py).
RECORD_MARGIN_S = 5.0
POLL_INTERVAL_S = 0.1

# Claims the key, or takes over a started call whose sender stopped (its hold is over) and that
# was sent once, when the same tool and arguments are asked for again. RETURNING: ours to send,
# as attempt n.
_CLAIM = """
INSERT INTO tool_calls AS t (user_id, correlation_id, step_key, call_index, tool_id, arguments,
                             state, attempts, started_at, hold_until)
VALUES (%(user_id)s, %(correlation_id)s, %(step_key)s, %(call_index)s, %(tool_id)s,
        %(arguments)s, 'started', 1, %(now)s, %(hold_until)s)
ON CONFLICT (user_id, correlation_id, step_key, call_index) DO UPDATE
   SET attempts = t.attempts + 1, hold_until = EXCLUDED.hold_until
 WHERE t.state = 'started' AND t.hold_until <= EXCLUDED.started_at
   AND t.attempts < %(max_sends)s
   AND t.tool_id = EXCLUDED.tool_id AND t.arguments = EXCLUDED.arguments
RETURNING t.attempts
"""

_READ = """
SELECT state, attempts, outcome, is_error, hold_until, tool_id,
       tool_id = %(tool_id)s AND arguments = %(arguments)s
  FROM tool_calls
 WHERE user_id = %(user_id)s AND correlation_id = %(correlation_id)s
   AND step_key = %(step_key)s AND call_index = %(call_index)s
"""

# Only the send that holds the row records: one that was taken over meanwhile leaves the row
# to its new holder.
_DONE = """
UPDATE tool_calls
   SET state = 'done', outcome = %(outcome)s, is_error = %(is_error)s, finished_at = %(now)s
 WHERE user_id = %(user_id)s AND correlation_id = %(correlation_id)s
   AND step_key = %(step_key)s AND call_index = %(call_index)s
   AND state = 'started' AND attempts = %(attempt)s
"""

# Retention's (:mod:`llm_bot.lifecycle.retention`): tool calls go with the event records they
# belong to. A call is kept as long as its event's record may still meet a redelivery (the
# record is what makes the redelivery replay it), and goes once the record has gone. A call can
# only be made under its event's claim, so every call of a run had a record; "started before
# the cutoff" reads by index and leaves alone the calls of an event whose record is being
# claimed right now.
_EXPIRED_CALLS = """
DELETE FROM tool_calls t USING (
    SELECT user_id, correlation_id, step_key, call_index FROM tool_calls c
     WHERE c.started_at < %(cutoff)s
       AND NOT EXISTS (SELECT 1 FROM processed_events p
                        WHERE p.user_id = c.user_id AND p.correlation_id = c.correlation_id
                          AND p.step_key = c.step_key)
     LIMIT %(batch)s) old
 WHERE t.user_id = old.user_id AND t.correlation_id = old.correlation_id
   AND t.step_key = old.step_key AND t.call_index = old.call_index
"""


async def delete_expired(connection: AsyncConnection[Any], cutoff: datetime, batch: int) -> int:
    """Up to ``batch`` calls started before ``cutoff`` whose event record is gone."""
    params = {"cutoff": cutoff, "batch": batch}
    return (await connection.execute(_EXPIRED_CALLS, params)).rowcount


# Erasure's and export's rows (:mod:`llm_bot.lifecycle.erasure`): a user's calls, and a
# thread's, found through its event records (a call names its user and event, not its thread).
def rows_of_user(user_id: str) -> Rows:
    return Rows("tool_calls", "FROM tool_calls WHERE user_id = %(user)s", {"user": user_id})


_ROWS_OF_THREAD = """FROM tool_calls WHERE (user_id, correlation_id, step_key) IN (
    SELECT user_id, correlation_id, step_key FROM processed_events WHERE thread_id = %(thread)s)"""


def rows_of_thread(thread_id: str) -> Rows:
    return Rows("tool_calls", _ROWS_OF_THREAD, {"thread": thread_id})


# One event's calls as an explanation shows them (:mod:`llm_bot.explanation.reader`): how each
# ended, never its arguments or result.
_CALLS_OF_EVENT = """
SELECT call_index, state FROM tool_calls
 WHERE user_id = %(user)s AND correlation_id = %(correlation_id)s AND step_key = %(step)s
"""


async def call_states(connection: AsyncConnection[Any], event: EventKey) -> dict[int, str]:
    """How each of the event's calls ended (or stands), by its index."""
    params = {"user": event.user_id, "correlation_id": event.correlation_id, "step": event.step}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_CALLS_OF_EVENT, params)
        return {int(index): str(state) for index, state in await cursor.fetchall()}


@dataclass(frozen=True)
class _Record:
    state: str
    attempts: int
    outcome: ToolOutcome | None
    hold_until: datetime
    tool_id: str
    same_call: bool


class PostgresToolLedger:
    """The :class:`~llm_bot.platform_tools.calls.ToolLedger` of a worker with a database."""

    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        *,
        hold_s: float,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._pool, self._hold, self._clock = pool, timedelta(seconds=hold_s), clock

    @classmethod
    def from_settings(
        cls, pool: AsyncConnectionPool[AsyncConnection[Any]], settings: Settings
    ) -> PostgresToolLedger:
        """A call's sender is given the tool's timeout and the time to record its outcome."""
        return cls(pool, hold_s=settings.tool_timeout_ms / 1000 + RECORD_MARGIN_S)

    async def once(
        self,
        key: CallKey,
        tool_id: str,
        arguments: Mapping[str, Any],
        call: Callable[[], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        params = _key_params(key) | {"tool_id": tool_id, "arguments": Jsonb(_storable(arguments))}
        while True:
            now = self._clock()
            attempt = await self._claim(params, now)
            if attempt is not None:
                return await self._send(key, params, attempt, call)
            record = await self._read(params)
            if record is None:  # erased between our two statements: claim again
                continue
            if record.state == "done" or not record.same_call:
                return _answer(key, tool_id, record)
            if record.hold_until > now:  # its sender may be waiting for the answer
                await asyncio.sleep(POLL_INTERVAL_S)
            elif record.attempts >= MAX_SENDS:
                return _unknown(key, tool_id, record)
            # else: the row changed between our two statements; claim again

    async def _claim(self, params: dict[str, Any], now: datetime) -> int | None:
        claim = params | {"now": now, "hold_until": now + self._hold, "max_sends": MAX_SENDS}
        async with self._pool.connection() as connection:
            row = await (await connection.execute(_CLAIM, claim)).fetchone()
        return None if row is None else int(row[0])

    async def _read(self, params: dict[str, Any]) -> _Record | None:
        async with self._pool.connection() as connection:
            row = await (await connection.execute(_READ, params)).fetchone()
        if row is None:
            return None
        state, attempts, text, is_error, hold_until, tool_id, same_call = row
        outcome = None if text is None else ToolOutcome(text, bool(is_error))
        return _Record(state, attempts, outcome, hold_until, tool_id, bool(same_call))

    async def _send(
        self,
        key: CallKey,
        params: dict[str, Any],
        attempt: int,
        call: Callable[[], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        if attempt == 1:
            _count("sent", key, params["tool_id"])
        else:
            _count("repeated", key, params["tool_id"], logging.WARNING)
        outcome = await call()
        done = params | {
            "outcome": storable(outcome.text),
            "is_error": outcome.is_error,
            "now": self._clock(),
            "attempt": attempt,
        }
        try:
            async with self._pool.connection() as connection:
                await connection.execute(_DONE, done)
        except psycopg.Error as error:  # PoolTimeout too
            # The call was made and its outcome is here: answering it beats failing the event,
            # whose retry would repeat the call. The started row allows that one repeat anyway.
            logger.warning(
                "tool call outcome not recorded",
                extra=_log_fields(key, params["tool_id"]) | {"error": type(error).__name__},
            )
        return outcome


def _answer(key: CallKey, tool_id: str, record: _Record) -> ToolOutcome:
    """A done call asked for again: its recorded outcome; another call at its index: not sent."""
    if record.same_call and record.outcome is not None:
        _count("replayed", key, tool_id)
        return record.outcome
    _count("not_repeated", key, tool_id, logging.WARNING)
    said = (
        f" Its result was: {record.outcome.text}"
        if record.outcome is not None
        else " No result of it was recorded."
    )
    return ToolOutcome(
        f"Not sent: call {key.call_index} of this message was already made on an earlier"
        f" attempt, as {record.tool_id} with other arguments, and calls are never repeated." + said,
        is_error=True,
    )


def _unknown(key: CallKey, tool_id: str, record: _Record) -> ToolOutcome:
    """A call sent twice whose senders both stopped before recording: never sent a third time."""
    _count("unknown", key, tool_id, logging.WARNING)
    return ToolOutcome(
        f"Not sent: this call was sent {record.attempts} times on earlier attempts to handle"
        " this message and no answer was recorded, so whether it took effect is unknown."
        " Check before asking for it again.",
        is_error=True,
    )


def _storable(value: Any) -> Any:
    """``value`` (JSON from the model) with every string, keys included, storable in jsonb."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return {storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(item) for item in value]
    return value


def _key_params(key: CallKey) -> dict[str, Any]:
    return {
        "user_id": key.user_id,
        "correlation_id": key.correlation_id,
        "step_key": key.step_key,
        "call_index": key.call_index,
    }


def _log_fields(key: CallKey, tool_id: str) -> dict[str, Any]:
    """Never the arguments or the outcome: they may hold user data."""
    return {"tool": tool_id, "correlation_id": key.correlation_id, "call_index": key.call_index}


def _count(result: str, key: CallKey, tool_id: str, level: int = logging.DEBUG) -> None:
    metrics.tool_ledger.add(1, {"result": result})
    logger.log(level, "tool call %s", result, extra=_log_fields(key, tool_id))
