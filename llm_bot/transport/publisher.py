"""Publishing from the event loop: the client batches and retries on its own threads, the loop
only awaits the confirmation, within a bound.

With ordering on, a failed publish pauses its ordering key inside the client (so later messages
of that thread cannot overtake it); the key is resumed here before the failure is reported, and
the nacked event's redelivery publishes it again in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Protocol

from google.api_core.exceptions import InvalidArgument, NotFound, PermissionDenied
from google.cloud import pubsub_v1

from llm_bot.errors import DeadLetterError, RetryLaterError
from llm_bot.settings import Settings
from llm_bot.transport.clients import PUBLISH_TIMEOUT_S, publisher_client

logger = logging.getLogger(__name__)

# The client gives up after PUBLISH_TIMEOUT_S; this only guards against a confirmation that
# never comes at all.
_CONFIRM_TIMEOUT_S = PUBLISH_TIMEOUT_S + 5.0


class PublishFailed(RetryLaterError):
    """Pub/Sub did not confirm a publish in time; a redelivery will try again."""


class PublishRejected(DeadLetterError):
    """Pub/Sub refused the message or its topic (missing, forbidden, over a limit): sending it
    again cannot succeed, so the event is dead-lettered instead of retried forever."""

    kind = "publish_rejected"


# Refusals of the request itself, by the service or by the client's own checks.
_REJECTIONS = (NotFound, PermissionDenied, InvalidArgument, ValueError, TypeError)


class EventPublisher(Protocol):
    """What the handler publishes through: :class:`Publisher` on Pub/Sub; tests of the handler
    give it one that keeps the messages in memory."""

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str], ordering_key: str = ""
    ) -> str: ...


class Publisher:
    def __init__(self, client: pubsub_v1.PublisherClient, project: str) -> None:
        self._client = client
        self._project = project

    @classmethod
    def from_settings(cls, settings: Settings) -> Publisher:
        client = publisher_client(settings.pubsub_emulator_host, ordering=settings.ordering)
        return cls(client, settings.google_cloud_project)

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str], ordering_key: str = ""
    ) -> str:
        """Publish to ``topic`` (a short name) and return the message id once confirmed."""
        path = self._client.topic_path(self._project, topic)
        try:
            future = self._client.publish(path, data, ordering_key=ordering_key, **attributes)
            message_id: str = await asyncio.wait_for(
                asyncio.wrap_future(future), _CONFIRM_TIMEOUT_S
            )
        except Exception as error:
            if ordering_key:
                self._client.resume_publish(path, ordering_key)
            if isinstance(error, _REJECTIONS):
                raise PublishRejected(f"publish to {topic!r} refused: {error}") from error
            raise PublishFailed(f"publish to {topic} failed: {type(error).__name__}") from error
        return message_id

    def close(self) -> None:
        """Flush what is batched, then drop the connection; blocks, so call it off the loop."""
        self._client.stop()
        self._client.transport.close()
