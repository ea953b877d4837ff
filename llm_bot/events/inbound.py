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
from datetime import datetime

from llm_bot.clock import utc_now
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
    ``last_attempt`` the last one accepted; ``asked_at`` when the user asked
    (:func:`asked_at_of`)."""

    event: InternalEventV2
    user_id: str
    thread_id: str
    direct: bool
    key: EventKey
    deadline_s: float | None = None
    attempt: int = 1
    last_attempt: int = 1
    asked_at: datetime | None = None


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
    now: datetime | None = None,
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
        asked_at_of(event, now or utc_now()),
    )


def asked_at_of(event: InternalEventV2, now: datetime) -> datetime | None:
    """When the user asked: the event's ``ingress.ingressAt``, so that a question's "yesterday"
    is the day before it was asked, however long it waited on the bus (a backlog after an
    outage). Never after ``now`` (a producer's clock ahead, or a made-up time, cannot move it
    into the future); None when the time is no ISO-8601 timestamp with a zone (then the time
    of answering stands in)."""
    try:
        at = datetime.fromisoformat(event.ingress.ingress_at)
    except ValueError:
        return None
    if at.tzinfo is None:
        return None
    return min(at, now)


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
    check_route(event, settings.bus_prefix)
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
