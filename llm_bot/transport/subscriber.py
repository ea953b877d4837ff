"""Streaming pull into one asyncio event loop.

google-cloud-pubsub reads the stream on its own threads and hands each message to a scheduler;
ours puts the callback straight on the event loop (``call_soon_threadsafe``), where the
message becomes a task, instead of first passing it through the client's thread pool (one
more thread to wake and hand the GIL to, per message). So the graph, the database pool and
the publisher are used from one thread, and ``FlowControl`` (``LLM_BOT_MAX_IN_FLIGHT``) bounds
how many tasks exist at once.

Shutdown stops taking work (messages that still arrive are parked, unsettled), gives in-flight
work the grace period, cancels (nacks) the rest, nacks the parked ones, and only then closes
the stream (``future.cancel()`` then ``future.result()``, as in Google's samples): the client
drops acks once its stream is closed. Anything settled after that goes over unary
``Acknowledge``/``ModifyAckDeadline`` calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any

from google.api_core.exceptions import GoogleAPICallError
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.futures import StreamingPullFuture
from google.cloud.pubsub_v1.subscriber.message import Message
from google.cloud.pubsub_v1.subscriber.scheduler import Scheduler

logger = logging.getLogger(__name__)

_UNARY_TIMEOUT_S = 5.0
_STOP_TIMEOUT_S = 10.0


class PulledMessage:
    """A :class:`~llm_bot.transport.ack.Delivery` backed by a streaming-pull message."""

    def __init__(self, message: Message, source: StreamingSubscriber) -> None:
        self._message = message
        self._source = source
        self.data: bytes = message.data
        self.attributes: Mapping[str, str] = dict(message.attributes)
        self.message_id: str = message.message_id
        # None when the subscription has no dead-letter policy: then every delivery is "first".
        self.delivery_attempt: int = message.delivery_attempt or 1
        self.publish_time: datetime = message.publish_time

    async def ack(self) -> None:
        if self._source.streaming:
            self._message.ack()
        else:
            await self._source.settle_directly(self._message.ack_id, acknowledge=True)

    async def nack(self) -> None:
        if self._source.streaming:
            self._message.nack()
        else:
            await self._source.settle_directly(self._message.ack_id, acknowledge=False)


Handler = Callable[[PulledMessage], Coroutine[Any, Any, None]]


class LoopScheduler(Scheduler):  # type: ignore[misc]  # the client library is untyped
    """Runs the client's message callbacks on an event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: queue.Queue[Any] = queue.Queue()  # the client's own requests (acks...)

    @property
    def queue(self) -> queue.Queue[Any]:
        return self._queue

    def schedule(self, callback: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(functools.partial(callback, *args, **kwargs))
        except RuntimeError:  # the loop is gone: give the message back
            for message in args:
                if isinstance(message, Message):
                    message.nack()

    def shutdown(self, await_msg_callbacks: bool = False) -> list[Message]:
        """Nothing is held here: what reached the loop is settled by the subscriber's stop."""
        return []


class StreamingSubscriber:
    def __init__(
        self,
        client: pubsub_v1.SubscriberClient,
        subscription_path: str,
        handler: Handler,
        *,
        max_in_flight: int,
        max_message_bytes: int,
        lease_extension_s: int,
    ) -> None:
        self._client = client
        self._path = subscription_path
        self._handler = handler
        self._flow_control = pubsub_v1.types.FlowControl(
            max_messages=max_in_flight,
            max_bytes=max_in_flight * max_message_bytes,
            # Extend leases in short steps: if this process dies, Pub/Sub hands its messages
            # to another instance within about this long, not after a long extension. It is
            # also the stream's ack deadline, so a message must be read within it.
            max_duration_per_lease_extension=lease_extension_s,
        )
        self._future: StreamingPullFuture | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._parked: list[Message] = []
        self.stream_ended = asyncio.Event()
        self.streaming = False
        self.accepting = True

    @property
    def path(self) -> str:
        """The subscription's full path."""
        return self._path

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def subscribed(self) -> bool:
        return self.streaming and self._future is not None and not self._future.done()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._future = self._client.subscribe(
            self._path,
            callback=self._accept,
            flow_control=self._flow_control,
            scheduler=LoopScheduler(loop),
        )
        self.streaming = True
        self._future.add_done_callback(functools.partial(self._on_stream_end, loop))

    def stream_error(self) -> BaseException | None:
        """Why the stream ended by itself (None while it runs or after a requested stop)."""
        future = self._future
        if future is None or not future.done() or future.cancelled():
            return None
        error: BaseException | None = future.exception()
        return error

    def _on_stream_end(self, loop: asyncio.AbstractEventLoop, _: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first; nobody is waiting
            loop.call_soon_threadsafe(self.stream_ended.set)

    def _accept(self, message: Message) -> None:
        if not self.accepting:  # draining: keep it unsettled until in-flight work is done
            self._parked.append(message)
            return
        task = asyncio.create_task(self._handler(PulledMessage(message, self)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self, grace_s: float) -> tuple[int, int]:
        """Stop taking work, give in-flight work ``grace_s``, hand back the rest, close.

        Returns (finished, handed back). Everything is settled while the stream is still open:
        the emulator ignores acks by id once a stream is gone, and nacking new arrivals during
        the grace would have them redelivered to us at once, burning delivery attempts.
        """
        self.accepting = False
        finished, cancelled = await finish_within(set(self._tasks), grace_s)
        parked, self._parked = self._parked, []
        for message in parked:
            message.nack()
        await self._close_stream()
        # Pub/Sub may redeliver a nack to this very stream before it closes: those come last.
        late, self._parked = self._parked, []
        for message in late:
            await self.settle_directly(message.ack_id, acknowledge=False)
        return finished, cancelled + len(parked) + len(late)

    async def _close_stream(self) -> None:
        """``future.cancel()`` then ``future.result()``; the client nacks what it still held."""
        future, self.streaming = self._future, False
        if future is None:
            return
        future.cancel()
        try:
            await asyncio.to_thread(future.result, _STOP_TIMEOUT_S)
        except Exception as error:  # the stream may already have ended with an error
            logger.debug("streaming pull ended: %r", error)

    async def settle_directly(self, ack_id: str, *, acknowledge: bool) -> None:
        """Ack or nack by id over a unary call (the stream is closed); best effort."""
        try:
            if acknowledge:
                await asyncio.to_thread(
                    self._client.acknowledge,
                    subscription=self._path,
                    ack_ids=[ack_id],
                    timeout=_UNARY_TIMEOUT_S,
                )
            else:
                await asyncio.to_thread(
                    self._client.modify_ack_deadline,
                    subscription=self._path,
                    ack_ids=[ack_id],
                    ack_deadline_seconds=0,
                    timeout=_UNARY_TIMEOUT_S,
                )
        except GoogleAPICallError as error:  # the message comes back after its ack deadline
            logger.warning("could not settle a message after shutdown: %s", error)

    def close(self) -> None:
        """Drop the connection; blocks, so call it off the loop."""
        self._client.close()


async def finish_within(tasks: set[asyncio.Task[Any]], grace_s: float) -> tuple[int, int]:
    """Give ``tasks`` ``grace_s`` to finish, cancel the rest and wait for them to end; returns
    (finished, cancelled). A cancelled handler hands its message back (``settle``)."""
    if not tasks:
        return 0, 0
    _, unfinished = await asyncio.wait(tasks, timeout=grace_s)
    for task in unfinished:
        task.cancel()
    await asyncio.gather(*unfinished, return_exceptions=True)
    return len(tasks) - len(unfinished), len(unfinished)
