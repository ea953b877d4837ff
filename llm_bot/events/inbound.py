"""One received event and the facts every later stage needs about it, worked out once.

Who sent it and which conversation it belongs to (:mod:`llm_bot.events.identity`), the key of
its processed-events record, how long its producer waits and how many attempts it gets: the
transport receives the message here (:func:`received`: decoded, recorded, checked) and hands
the record down, so the ledger, the graph and memory read the same values instead of deriving
them again, and cannot disagree on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llm_bot.events.codec import decode
from llm_bot.events.identity import is_direct, thread_id_of, user_id_of
from llm_bot.events.limits import check_event
from llm_bot.events.models import InternalEventV2
from llm_bot.events.routing import check_route, current_step
from llm_bot.settings import Settings

NO_STEP = "none"


@dataclass(frozen=True)
class EventKey:
    """An event's record: its user (first, the rows' distribution key), then the event and its
    routing step."""

    user_id: str
    correlation_id: str
    step: str

    @property
    def source(self) -> str:
        """The incoming event and step, as history names the turn's source."""
        return f"{self.correlation_id}:{self.step}"


@dataclass(frozen=True)
class Inbound:
    """``event`` as received, never modified, with what follows from it. ``deadline_s`` is
    ``None`` when nothing waits for the answer; ``attempt`` is the delivery's number,
    ``last_attempt`` the last one accepted."""

    event: InternalEventV2
    user_id: str
    thread_id: str
    direct: bool
    key: EventKey
    deadline_s: float | None = None
    attempt: int = 1
    last_attempt: int = 1


def key_of(event: InternalEventV2, user_id: str) -> EventKey:
    """The event's current (first PENDING) step by position and id: a slip may visit llm-bot
    twice."""
    for index, step in enumerate(event.routing.slip):
        if step.status == "PENDING":
            return EventKey(user_id, event.correlation_id, f"{index}:{step.id}")
    return EventKey(user_id, event.correlation_id, NO_STEP)


def inbound_of(
    event: InternalEventV2,
    *,
    deadline_s: float | None = None,
    attempt: int = 1,
    last_attempt: int = 1,
) -> Inbound:
    user_id = user_id_of(event)
    return Inbound(
        event,
        user_id,
        thread_id_of(event),
        is_direct(event),
        key_of(event, user_id),
        deadline_s,
        attempt,
        last_attempt,
    )


def received(
    data: bytes, attributes: Mapping[str, str], settings: Settings, attempt: int
) -> Inbound:
    """The record of a message delivered for the ``attempt``-th time, with the deadline and
    the attempt limit the settings and the event set; raises a
    :class:`~llm_bot.errors.DeadLetterError` for one that can never be processed
    (:mod:`llm_bot.events.limits`, :func:`llm_bot.events.routing.check_route`)."""
    event = decode(data, attributes, settings.max_message_bytes)
    inbound = inbound_of(
        event,
        deadline_s=deadline_s(event, settings.event_deadline_ms, settings.max_response_ms),
        attempt=attempt,
        last_attempt=attempt_limit(event, settings.max_delivery_attempts),
    )
    check_event(
        event, settings.max_slip_steps, user_id=inbound.user_id, thread_id=inbound.thread_id
    )
    check_route(event)
    return inbound


def deadline_s(event: InternalEventV2, default_ms: int, max_ms: int) -> float:
    """``qos.maxResponseMs`` when the producer set one (at most ``LLM_BOT_MAX_RESPONSE_MS``),
    else ``LLM_BOT_EVENT_DEADLINE_MS``."""
    wanted = event.qos.max_response_ms if event.qos else None
    return min(wanted or default_ms, max_ms) / 1000


def attempt_limit(event: InternalEventV2, limit: int) -> int:
    """The last attempt we accept: the step's ``maxAttempts`` may lower the setting."""
    step = current_step(event)
    if step is not None and step.max_attempts:
        return min(limit, step.max_attempts)
    return limit
