"""The channel hears "🤔 Thinking about your request..." while the model is still working.

BitBrat's llm-bot marks each event it handles with an ``operation_context`` annotation, and its
feedback middleware (``src/common/middleware/feedback-middleware.ts``) publishes a
``progress_feedback`` event to ``internal.egress.v1`` when that event leaves the service 2 s or
more after it arrived: decided once the answer exists, so the message lands just before the
reply. Here the same event goes out from a timer that runs while the answer is being made, and
never once the answer exists. The rules, all kept in this module and the handler:

- **When.** ``LLM_BOT_PROGRESS_AFTER_MS`` after handling began (BitBrat's ``startedAt``), but
  only once the model has been called: the timer is armed by the event's first model call. An
  event that ends before the model (no task, a refusal, a SKIP) never hears it.
- **Never after the reply.** The handler stops the watch as soon as the graph returned, and
  waits for a progress publish already under way before it publishes the reply (it overlaps
  the commit; only a Pub/Sub that is slow to confirm, as it would be for the reply too, makes
  the reply wait, at most the publisher's confirmation bound).
- **At most once per event.** One timer per handling, and only on the event's first claim in
  the processed-events ledger (``Claim.attempt == 1``). A later claim means an earlier holder
  ran the model and may have sent it; the claim count already records that, durably and before
  the model runs, so no second record is needed. The price: an event whose first holder failed
  before its timer fired gets no progress message on the retry. It is a courtesy, sent at most
  once; a duplicate "thinking" in the channel is the worse fault. (BitBrat's middleware also
  sends one message per event: its 30 s "taking longer" text instead, when the answer took
  that long; here the first text is the only one.)
- **Not for progress events.** BitBrat recognises them by type ``chat.progress.v1`` (its
  ``createProgressEvent``); they get neither the timer nor ``operation_context``.
- **One event's fault stays its own.** A failed progress publish is logged and dropped; it has
  no ordering key, since a failed publish pauses its key in the client and would hold back the
  reply of the same thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from uuid import uuid4

from llm_bot.bus_names import prefixed
from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.events.codec import encode
from llm_bot.events.models import SOURCE, AnnotationV1, InternalEventV2, MessageV1, Routing
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.graph.state import ChatModel, GraphContext
from llm_bot.llm.messages import ChatMessage, ModelReply, ToolSpec
from llm_bot.telemetry.traces import inject
from llm_bot.transport.publisher import EventPublisher
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)

PROGRESS_EVENT_TYPE = "chat.progress.v1"  # BitBrat's DerivedEventTypes.PROGRESS
PROGRESS_TEXT = "🤔 Thinking about your request..."  # its TEMPLATE_MESSAGES.initial
FEEDBACK_SOURCE = "feedback-middleware"  # the annotation's source, as BitBrat writes it
EGRESS_EVENT_TYPE = "internal.egress.v1"


def is_progress_event(event: InternalEventV2) -> bool:
    return event.type == PROGRESS_EVENT_TYPE


def _json(value: dict[str, Any]) -> str:
    """JSON as JavaScript's ``JSON.stringify`` writes it: compact, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def add_operation_context(event: InternalEventV2) -> None:
    """Append BitBrat's ``operation_context`` annotation (not to progress events): it travels
    with the output, as BitBrat's does, for the platform's later stages."""
    if is_progress_event(event):
        return
    now = utc_now()
    value = {
        "operation": "llm_request",
        "originalMessage": (event.message.text if event.message else None) or "",
        "eventType": event.type,
        "startedAt": int(now.timestamp() * 1000),
    }
    annotation = AnnotationV1(
        id=str(uuid4()),
        kind="operation_context",
        source=SOURCE,
        created_at=iso_timestamp(now),
        value=_json(value),
    )
    event.annotations = [*(event.annotations or []), annotation]


def progress_event(event: InternalEventV2, elapsed_ms: int) -> InternalEventV2:
    """The event BitBrat's feedback middleware publishes (``sendTemplateMessage``): a new
    correlation id, the original's ingress, identity and egress, the text as an assistant
    message, no candidate, an empty slip."""
    now = iso_timestamp(utc_now())
    feedback = {"originalCorrelationId": event.correlation_id, "stage": "initial"}
    return InternalEventV2(
        v="2",
        correlation_id=str(uuid4()),
        type=EGRESS_EVENT_TYPE,
        ingress=event.ingress,
        identity=event.identity,
        egress=event.egress,
        message=MessageV1(id=str(uuid4()), role="assistant", text=PROGRESS_TEXT),
        payload={"type": EGRESS_EVENT_TYPE},
        routing=Routing(stage="response", slip=[], history=[]),
        annotations=[
            AnnotationV1(
                id=str(uuid4()),
                kind="progress_feedback",
                source=FEEDBACK_SOURCE,
                created_at=now,
                value=_json({**feedback, "elapsedMs": elapsed_ms}),
            )
        ],
    )


def progress_subject(document: Any) -> str | None:
    """The correlation id of the event a published progress message (:func:`progress_event`,
    as a JSON document) speaks for; None for any other document."""
    annotations = document.get("annotations") if isinstance(document, dict) else None
    for annotation in annotations if isinstance(annotations, list) else []:
        if isinstance(annotation, dict) and annotation.get("kind") == "progress_feedback":
            try:
                feedback = json.loads(str(annotation.get("value")))
            except json.JSONDecodeError:
                return None
            subject = feedback.get("originalCorrelationId") if isinstance(feedback, dict) else None
            return subject if isinstance(subject, str) else None
    return None


@dataclass(frozen=True)
class _ArmingModel:
    """The run's model, telling the watch when it is first called."""

    inner: ChatModel
    watch: ProgressWatch

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], model: str | None = None
    ) -> ModelReply:
        self.watch.arm()
        return await self.inner.complete(messages, tools, model)


class ProgressWatch:
    """One handling's timer: armed by the first model call, fired at most once, stopped when
    the answer exists. ``after_s`` None never fires (disabled, a retry, a progress event)."""

    def __init__(
        self, feedback: ProgressFeedback, event: InternalEventV2, after_s: float | None
    ) -> None:
        self._feedback = feedback
        self._event = event
        self._after_s = after_s
        self._began = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None

    def bind(self, context: GraphContext) -> GraphContext:
        """``context`` whose model arms this watch."""
        if self._after_s is None:
            return context
        return replace(context, model=_ArmingModel(context.model, self))

    def arm(self) -> None:
        if self._after_s is None or self._timer is not None:
            return
        delay = max(0.0, self._began + self._after_s - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        elapsed_ms = round((time.monotonic() - self._began) * 1000)
        self._sending = asyncio.create_task(self._feedback.send(self._event, elapsed_ms))

    def stop(self) -> None:
        """No message from now on (one already under way still goes out)."""
        self._after_s = None
        if self._timer is not None:
            self._timer.cancel()
            # A cancelled handle still holds the context it was armed in, the graph run's,
            # which holds this watch through the run's model: kept, that cycle would leave the
            # whole run to the cyclic collector instead of reference counting.
            self._timer = None

    async def settled(self) -> None:
        """Stopped, with a publish under way finished: the reply may go out now."""
        self.stop()
        if self._sending is not None:
            await self._sending
            self._sending = None  # made in the armed context: the same cycle as the timer's


class ProgressFeedback:
    """Publishes progress messages for the worker's events (see the module docstring)."""

    def __init__(
        self, publisher: EventPublisher, stats: WorkerStats, *, after_ms: int, bus_prefix: str
    ) -> None:
        self._publisher = publisher
        self._stats = stats
        self._after_s = after_ms / 1000 if after_ms > 0 else None
        self._topic = prefixed(DEFAULT_EGRESS_TOPIC, bus_prefix)

    def watch(self, event: InternalEventV2, *, first_claim: bool) -> ProgressWatch:
        wanted = first_claim and not is_progress_event(event)
        return ProgressWatch(self, event, self._after_s if wanted else None)

    async def send(self, event: InternalEventV2, elapsed_ms: int) -> None:
        """Publish the message; a failure is logged, never raised."""
        try:
            data, attributes = encode(progress_event(event, elapsed_ms))
            attributes["source"] = SOURCE
            inject(attributes)
            await self._publisher.publish(self._topic, data, attributes)
        except Exception as error:
            logger.warning(
                "progress message not sent: %s",
                error,
                extra={"correlationId": event.correlation_id},
            )
            return
        self._stats.progress_sent += 1
        logger.info(
            "progress message sent",
            extra={"correlationId": event.correlation_id, "elapsedMs": elapsed_ms},
        )
