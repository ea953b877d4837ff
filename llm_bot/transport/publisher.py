"""Publishing from the event loop: messages queued in one turn of the loop go to Pub/Sub
together, a request per topic (and ordering key), sent from a pool of long-lived threads; the
loop only awaits the confirmation, within a bound.

The client library's batcher (``PublisherClient.publish``) is not used. It fails every message
of a batch when Pub/Sub refuses one of them, so one event's bad output would dead-letter the
events published beside it; and it waits for company (``max_latency``) and starts two threads
for every batch (a timer and the request), at tens of events per second for nearly every
message. Here a message waits for no timer: what is queued while a request is on its way goes
in the next one (docs/performance.md, "Measured choices").

A request is sent with the client's own retry and timeout. Each topic has at most
``MAX_REQUESTS_PER_TOPIC`` requests on their way, whatever their ordering keys, so a topic whose
requests are retried holds that many threads, never all of them. A topic's messages of one
ordering key (the handler gives one with ``LLM_BOT_ORDERING`` on) go one request at a time, in
the order they were published, never in a request with another key's; when one of them fails for
a reason that may pass, the messages of its key behind it fail with it (as the client's paused
key would fail them), and the nacked events' redeliveries publish them again in order.

Pub/Sub refuses a whole request for one bad message (an attribute past its limits, an empty
message); a refused request of several messages is sent again one message a request, so only
the bad message's event is refused and dead-lettered. A topic that does not exist or is
forbidden refuses every message sent to it.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from google.api_core.exceptions import InvalidArgument, NotFound, PermissionDenied
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapicClient
from google.pubsub_v1.types import PubsubMessage

from llm_bot.errors import DeadLetterError, RetryLaterError
from llm_bot.settings import Settings
from llm_bot.transport.clients import PUBLISH_RETRY, PUBLISH_TIMEOUT_S, request_client

# The client gives up after PUBLISH_TIMEOUT_S; this only guards against a confirmation that
# never comes at all.
_CONFIRM_TIMEOUT_S = PUBLISH_TIMEOUT_S + 5.0
# Pub/Sub's limits of one publish request.
MAX_REQUEST_BYTES = 10_000_000
MAX_REQUEST_MESSAGES = 1_000
# Requests on their way to one topic, whatever their ordering keys: a topic whose requests are
# retried holds that many of the threads, never all of them.
MAX_REQUESTS_PER_TOPIC = 8
PUBLISH_THREADS = 32
_FRAMING_BYTES = 8  # a message's field tag and length within the request


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


class _Behind(Exception):
    """A message not sent because one before it in its request or ordering key failed for a
    reason that may pass: its event is retried (:class:`PublishFailed`), never refused."""


@dataclass
class _Queued:
    message: PubsubMessage
    size: int
    confirmed: asyncio.Future[str]


@dataclass
class _Lane:
    """The messages of one topic and ordering key not yet sent, and how many of its requests
    are on their way (one at most for a key, so that its messages keep their order)."""

    ordered: bool
    queued: deque[_Queued] = field(default_factory=deque)
    sending: int = 0


class Publisher:
    def __init__(self, client: PublisherGapicClient, project: str) -> None:
        self._client = client
        self._project = project
        self._threads = ThreadPoolExecutor(PUBLISH_THREADS, thread_name_prefix="publish")
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._sending_to: Counter[str] = Counter()  # requests on their way, by topic path
        self._flushing = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Publisher:
        return cls(request_client(settings.pubsub_emulator_host), settings.google_cloud_project)

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str], ordering_key: str = ""
    ) -> str:
        """Publish to ``topic`` (a short name) and return the message id once confirmed."""
        path = self._client.topic_path(self._project, topic)
        try:
            message = PubsubMessage(data=data, attributes=attributes, ordering_key=ordering_key)
        except (TypeError, ValueError) as error:
            raise PublishRejected(f"publish to {topic!r} refused: {error}") from error
        size = PubsubMessage.pb(message).ByteSize() + _FRAMING_BYTES
        if size + len(path) > MAX_REQUEST_BYTES:
            raise PublishRejected(f"publish to {topic!r} refused: {size} bytes, over the limit")
        loop = asyncio.get_running_loop()
        confirmed: asyncio.Future[str] = loop.create_future()
        key = (path, ordering_key)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(ordered=bool(ordering_key))
        lane.queued.append(_Queued(message, size, confirmed))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        try:
            return await asyncio.wait_for(confirmed, _CONFIRM_TIMEOUT_S)
        except Exception as error:
            if isinstance(error, _REJECTIONS):
                raise PublishRejected(f"publish to {topic!r} refused: {error}") from error
            raise PublishFailed(f"publish to {topic} failed: {type(error).__name__}") from error

    def _flush(self) -> None:
        """Send what each lane has queued, as far as its requests on their way allow."""
        self._flushing = False
        for key, lane in list(self._lanes.items()):
            self._send_from(key, lane)

    def _send_from(self, key: tuple[str, str], lane: _Lane) -> None:
        while (
            lane.queued
            and not (lane.ordered and lane.sending)
            and self._sending_to[key[0]] < MAX_REQUESTS_PER_TOPIC
        ):
            batch = [lane.queued.popleft()]
            size = len(key[0]) + batch[0].size
            while (
                lane.queued
                and len(batch) < MAX_REQUEST_MESSAGES
                and size + lane.queued[0].size <= MAX_REQUEST_BYTES
            ):
                size += lane.queued[0].size
                batch.append(lane.queued.popleft())
            lane.sending += 1
            self._sending_to[key[0]] += 1
            sent = asyncio.get_running_loop().run_in_executor(
                self._threads, self._request, key[0], [each.message for each in batch]
            )
            sent.add_done_callback(partial(self._settle, key, lane, batch))
        if not lane.queued and not lane.sending:
            del self._lanes[key]

    def _request(self, path: str, messages: list[PubsubMessage]) -> Sequence[str | BaseException]:
        """One request (in a thread). Pub/Sub refuses a whole request for one bad message, so a
        refused request of several is sent again a message a request, in order, until one fails
        for another reason: the rest then fail too, to be published in order on redelivery. A
        topic that is missing or forbidden refuses them all."""
        try:
            return self._call(path, messages)
        except InvalidArgument as error:
            if len(messages) == 1:
                return [error]
        except _REJECTIONS as error:
            return [error] * len(messages)
        results: list[str | BaseException] = []
        for index, message in enumerate(messages):
            try:
                results += self._call(path, [message])
            except InvalidArgument as error:
                results.append(error)
            except Exception as error:
                behind = _Behind(f"a message before it failed: {type(error).__name__}")
                return [*results, error, *[behind] * (len(messages) - index - 1)]
        return results

    def _call(self, path: str, messages: list[PubsubMessage]) -> list[str]:
        response = self._client.publish(
            topic=path, messages=messages, retry=PUBLISH_RETRY, timeout=PUBLISH_TIMEOUT_S / 3
        )
        return list(response.message_ids)

    def _settle(
        self,
        key: tuple[str, str],
        lane: _Lane,
        batch: list[_Queued],
        done: asyncio.Future[Sequence[str | BaseException]],
    ) -> None:
        lane.sending -= 1
        self._sending_to[key[0]] -= 1
        if not self._sending_to[key[0]]:
            del self._sending_to[key[0]]
        error = RuntimeError("publish request cancelled") if done.cancelled() else done.exception()
        results: Sequence[str | BaseException] = (
            [error] * len(batch) if error is not None else done.result()
        )
        for queued, result in zip(batch, results, strict=True):
            if queued.confirmed.done():  # its publish gave up waiting
                continue
            if isinstance(result, BaseException):
                queued.confirmed.set_exception(result)
            else:
                queued.confirmed.set_result(result)
        # Behind a message of its ordering key that may yet be published (not one refused for
        # good): failed too, so redelivery publishes them again in order.
        if key[1] and any(
            isinstance(each, BaseException) and not isinstance(each, _REJECTIONS)
            for each in results
        ):
            while lane.queued:
                queued = lane.queued.popleft()
                if not queued.confirmed.done():
                    queued.confirmed.set_exception(_Behind("a message of its key failed"))
        self._flush()  # this lane, and the topic's others, may have waited for it to end

    def close(self) -> None:
        """Wait for the requests on their way, then drop the connection; blocks, so call it
        off the loop."""
        self._threads.shutdown(wait=True)
        self._client.transport.close()  # type: ignore[no-untyped-call]
