"""Routing-slip logic: close llm-bot's step and decide where the event goes next.

The slip is the platform's only coordination mechanism between stages, so the rules here are
the BitBrat ones (docs/architecture.md, events): the current step is the first ``PENDING`` one;
after it, the event goes to the next ``PENDING`` step's ``nextTopic``, or, when none is left, to the
egress destination with the best candidate selected.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from llm_bot.bus_names import is_pubsub_name, prefixed
from llm_bot.errors import DeadLetterError
from llm_bot.events.limits import MAX_ATTRIBUTE_BYTES, MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTES
from llm_bot.events.models import (
    CandidateV1,
    InternalEventV2,
    RoutingStatus,
    RoutingStep,
    StepError,
)

EGRESS_EVENT_TYPE = "egress.deliver.v1"
# The platform's default egress topic (BitBrat INTERNAL_EGRESS_V1), used by the local tooling.
DEFAULT_EGRESS_TOPIC = "internal.egress.v1"


class RoutingError(DeadLetterError):
    """The slip cannot be followed (e.g. a pending step names no topic): dead-lettered."""

    kind = "unroutable"


@dataclass(frozen=True)
class NextHop:
    """Where the processed event goes: a topic (without the bus prefix applied yet)."""

    topic: str
    is_egress: bool


def current_step(event: InternalEventV2) -> RoutingStep | None:
    """The step this stage executes: the first ``PENDING`` one, if any."""
    return next((step for step in event.routing.slip if step.status == "PENDING"), None)


def complete_current_step(
    event: InternalEventV2,
    status: RoutingStatus,
    now: str,
    error: StepError | None = None,
) -> RoutingStep | None:
    """Mark the current step ``status`` (with ``endedAt`` and, on failure, ``error``)."""
    step = current_step(event)
    if step is None:
        return None
    step.status = status
    step.ended_at = now
    if error is not None:
        step.error = error
    return step


def select_best_candidate(candidates: list[CandidateV1]) -> CandidateV1 | None:
    """The platform's choice (BitBrat's ``selectBestCandidate``): lowest priority wins (none is
    last), then highest confidence (none is -1). Among equals, where BitBrat draws one at
    random, the earliest ``createdAt`` (none or unreadable is last), then the first, so the
    same event always selects the same candidate."""
    if not candidates:
        return None
    return min(candidates, key=_rank)


def _rank(candidate: CandidateV1) -> tuple[float, float, float]:
    priority = math.inf if candidate.priority is None else candidate.priority
    confidence = -1.0 if candidate.confidence is None else candidate.confidence
    return (priority, -confidence, _moment(candidate.created_at))


def _moment(created_at: str | None) -> float:
    """``createdAt`` as seconds since the epoch; missing or unreadable is infinitely late."""
    try:
        at = datetime.fromisoformat(created_at or "")
    except ValueError:
        return math.inf
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def advance(event: InternalEventV2, now: str, with_prefix: str = "") -> NextHop:
    """Prepare ``event`` for the next hop and say where it goes.

    Call after :func:`complete_current_step`. The next ``PENDING`` step gets ``attempt`` + 1 (0
    when it had none, as the platform's base server counts) and ``startedAt``; with no step
    left the event becomes an ``egress.deliver.v1`` and its best candidate is marked
    ``selected``. ``with_prefix`` is the bus prefix (``BUS_PREFIX``).
    """
    step = current_step(event)
    if step is not None:
        topic = next_topic_of(step)
        step.attempt = (step.attempt if step.attempt is not None else -1) + 1
        step.started_at = now
        return NextHop(topic=prefixed(topic, with_prefix), is_egress=False)
    event.type = EGRESS_EVENT_TYPE
    best = select_best_candidate(event.candidates or [])
    if best is not None:
        best.status = "selected"
    return NextHop(topic=prefixed(event.egress.destination, with_prefix), is_egress=True)


def check_route(event: InternalEventV2, with_prefix: str = "") -> None:
    """Raise :class:`RoutingError` now if :func:`advance` would, once the current step is
    closed, or if Pub/Sub would refuse the hop: the topic it names (``with_prefix`` in front)
    or the attributes it carries. So a broken slip is dead-lettered before it costs a model
    call and leaves a reply nobody received in the thread's history."""
    pending = (step for step in event.routing.slip if step.status == "PENDING")
    next(pending, None)  # the current step, which this stage closes
    following = next(pending, None)
    if following is not None:
        where, topic = f"routing.slip step {following.id!r} nextTopic", next_topic_of(following)
    elif not event.egress.destination:
        raise RoutingError("no PENDING step follows this one and egress.destination is empty")
    else:
        where, topic = "egress.destination", event.egress.destination
    if not is_pubsub_name(prefixed(topic, with_prefix)):
        raise RoutingError(f"{where} {topic[:100]!r} is no Pub/Sub topic name")
    _check_attributes(carried_attributes(event, following))


def next_topic_of(step: RoutingStep) -> str:
    if not step.next_topic:
        raise RoutingError(f"routing.slip step {step.id!r} is PENDING but has no nextTopic")
    return step.next_topic


# Attributes a step may not set: the platform's base server writes them itself, last.
PROTECTED_ATTRIBUTES = frozenset({"correlationId", "type", "source"})


# Attributes we add beside a hop's own: the protected keys and the trace context (traceparent,
# tracestate, baggage).
OUR_ATTRIBUTES = len(PROTECTED_ATTRIBUTES) + 3


def hop_attributes(event: InternalEventV2, hop: NextHop) -> dict[str, str]:
    """The attributes of the message that carries ``event`` on (:func:`carried_attributes`).
    Call after :func:`advance`."""
    return carried_attributes(event, None if hop.is_egress else current_step(event))


def carried_attributes(event: InternalEventV2, step: RoutingStep | None) -> dict[str, str]:
    """The attributes a hop to ``step`` (``None``: to egress) carries, as the platform's base
    server builds them: ``replyTo`` when the event has one, then the step's ``attributes`` as
    text (``true`` as ``"true"``), never over the protected keys."""
    attributes: dict[str, str] = {}
    reply_to = (event.model_extra or {}).get("replyTo")
    if reply_to is not None:
        attributes["replyTo"] = _as_text(reply_to)
    for key, value in ((step.attributes or {}) if step else {}).items():
        if value is not None and key not in PROTECTED_ATTRIBUTES:
            attributes[key] = _as_text(value)
    return attributes


def _check_attributes(attributes: dict[str, str]) -> None:
    """Raise :class:`RoutingError` for attributes Pub/Sub would refuse to publish."""
    room = MAX_ATTRIBUTES - OUR_ATTRIBUTES
    if len(attributes) > room:
        raise RoutingError(
            f"the next hop would carry {len(attributes)} attributes, over the {room}"
            " Pub/Sub holds beside ours"
        )
    for key, value in attributes.items():
        if len(key.encode()) > MAX_ATTRIBUTE_KEY_BYTES:
            raise RoutingError(
                f"attribute {key[:40]!r}... of the next hop is a key over Pub/Sub's"
                f" {MAX_ATTRIBUTE_KEY_BYTES} bytes"
            )
        if len(value.encode()) > MAX_ATTRIBUTE_BYTES:
            raise RoutingError(
                f"attribute {key!r} of the next hop has a value over Pub/Sub's"
                f" {MAX_ATTRIBUTE_BYTES} bytes"
            )


def _as_text(value: object) -> str:
    """A JSON value as the platform's ``String(v)`` writes it, for the values rules use."""
    return value if isinstance(value, str) else json.dumps(value, allow_nan=False)
