"""``llm-bot send``: one prompt in, the candidate out.

With ``--local`` the graph runs in this process (against ``OPENAI_BASE_URL``, or an in-process
local model server when no model is configured; with long-term memory when ``DATABASE_URL`` is
set). Otherwise the event is published to the
input topic and the answer is awaited on a subscription of the egress topic, as a real
upstream service would see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from google.api_core.exceptions import DeadlineExceeded, NotFound, PermissionDenied
from google.cloud import pubsub_v1

from llm_bot.answer.unit import Answerer
from llm_bot.bus_names import prefixed
from llm_bot.events.codec import decode, encode, to_document
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import InternalEventV2
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.graph.assembly import context_from_settings, graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.memory.wiring import memory_services
from llm_bot.settings import Settings
from llm_bot.transport.progress import PROGRESS_TEXT, progress_subject
from llm_bot_tools.local.openai_server import LocalModelServer


class NoAnswer(TimeoutError):
    """Nothing came back in time: usually no worker is running."""


class ReplySubscriptionMissing(LookupError):
    """The subscription answers are read from does not exist. Only ``llm-bot dev`` makes it
    on its own; on real Pub/Sub an operator creates it (README, "Check it is ready")."""

    def __init__(self, subscription: str, egress_topic: str) -> None:
        super().__init__(
            f"reply subscription {subscription} does not exist; create it with"
            f" `gcloud pubsub subscriptions create {subscription} --topic={egress_topic}`"
            " or name another with --reply-subscription"
        )


@dataclass(frozen=True)
class SendRequest:
    event: InternalEventV2
    reply_subscription: str
    timeout_s: float


def run_locally(settings: Settings, event: InternalEventV2) -> dict[str, Any]:
    """Process ``event`` in-process; returns the processed event as a JSON document."""
    with contextlib.ExitStack() as stack:
        if settings.openai_base_url is None and settings.openai_api_key is None:
            server = stack.enter_context(LocalModelServer(model=settings.openai_model))
            settings = settings.model_copy(update={"openai_base_url": server.base_url})
        return asyncio.run(_process(settings, event))


async def _process(settings: Settings, event: InternalEventV2) -> dict[str, Any]:
    """With ``DATABASE_URL`` set, long-term memory takes part as it does in the worker."""
    model = ModelClient.from_settings(settings)
    try:
        async with memory_services(settings) as memory:
            context = context_from_settings(
                settings, model, memory.retriever, memory.memory_tools, memory.personalities
            )
            answerer = Answerer(graph_from_settings(settings), context, memory.commit)
            answer = await answerer.answer(inbound_of(event))
            await answerer.commit(answer)
    finally:
        await model.close()
    return to_document(answer.event)


def send_and_wait(settings: Settings, request: SendRequest) -> dict[str, Any]:
    """Publish to the input topic, then pull the reply subscription until our event comes back.

    The reply subscription is looked up first: an answer only reaches a subscription that
    existed when it was published, so without one nothing is sent."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    project = settings.google_cloud_project
    subscription = subscriber.subscription_path(project, request.reply_subscription)
    missing = ReplySubscriptionMissing(
        request.reply_subscription, prefixed(DEFAULT_EGRESS_TOPIC, settings.bus_prefix)
    )
    try:
        _require_subscription(subscriber, subscription, missing)
        topic = publisher.topic_path(project, prefixed(settings.input_topic, settings.bus_prefix))
        data, attributes = encode(request.event)
        publisher.publish(topic, data, **attributes).result(timeout=30)
        deadline = time.monotonic() + request.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                response = subscriber.pull(
                    subscription=subscription, max_messages=10, timeout=max(left, 1.0)
                )
            except DeadlineExceeded:  # an empty pull that outlasted its timeout: look again
                continue
            except NotFound:  # deleted while we waited
                raise missing from None
            for received in response.received_messages:
                if received.message.attributes.get("correlationId") == request.event.correlation_id:
                    subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
                    return to_document(decode(received.message.data))
                if _progress_subject(received.message.data) == request.event.correlation_id:
                    # the worker's "thinking" message for our event: shown, then taken
                    subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
                    print(f"llm-bot: {PROGRESS_TEXT}", file=sys.stderr)
                    continue
                # someone else's answer: hand it back at once
                subscriber.modify_ack_deadline(
                    subscription=subscription, ack_ids=[received.ack_id], ack_deadline_seconds=0
                )
    finally:
        subscriber.close()
    raise NoAnswer(
        f"no answer on {request.reply_subscription} within {request.timeout_s:g} s"
        " (is the worker running?)"
    )


def _progress_subject(data: bytes) -> str | None:
    try:
        return progress_subject(json.loads(data))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _require_subscription(
    subscriber: pubsub_v1.SubscriberClient, path: str, missing: ReplySubscriptionMissing
) -> None:
    """Raise ``missing`` when ``path`` does not exist. A caller allowed to pull but not to read
    the subscription's settings (roles/pubsub.subscriber alone) is let through: the pull then
    tells."""
    try:
        subscriber.get_subscription(subscription=path, timeout=30)
    except NotFound:
        raise missing from None
    except PermissionDenied:
        pass
