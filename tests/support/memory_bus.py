"""Pub/Sub's side of the event handler, in memory, for the tests of what the handler does.

Routing, dead letters, memory, progress messages and effectively-once are the handler's logic:
their tests hand :meth:`~llm_bot.transport.handler.EventHandler.handle` deliveries
(:class:`MemoryDelivery`, the :class:`~llm_bot.transport.ack.Delivery` seam) and a publisher
(:class:`MemoryPublisher`, the :class:`~llm_bot.transport.publisher.EventPublisher` seam) that
keep everything in memory, while the handler itself is the worker's own (:func:`open_handler`)
on real Postgres and the local model server over HTTP. What is published can be awaited at
once, and "nothing more came" is known as soon as every delivery is settled, where an emulator
tap can only conclude it from pulls that stay empty for seconds.

Pub/Sub's own part (streaming pull, flow control, ordering keys, redelivery by the service,
stopped and killed workers) is tested on the emulator: ``bus`` in
``tests/integration/conftest.py``.

:class:`MemoryBus` has the shape of :class:`~llm_bot_tools.devstack.worker_harness.Bus`
(topics named after a prefix, taps, ``publish``, ``settings``), and :meth:`MemoryBus.serving`
stands for ``running_worker``: deliveries run as concurrent tasks, at most
``LLM_BOT_MAX_IN_FLIGHT`` at a time; a nack delivers the message again with the next attempt
number (after a stop, to the next handler that serves); the stop gives in-flight work
``LLM_BOT_SHUTDOWN_GRACE_S`` and cancels the rest, as the subscriber does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from llm_bot.clock import utc_now
from llm_bot.events.codec import encode
from llm_bot.events.limits import MAX_ATTRIBUTE_BYTES, MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTES
from llm_bot.events.models import InternalEventV2
from llm_bot.settings import Settings
from llm_bot.transport.handler import EventHandler
from llm_bot.transport.publisher import PublishRejected
from llm_bot.transport.stats import WorkerStats
from llm_bot.transport.subscriber import finish_within
from llm_bot.worker.service import open_database, open_handler
from llm_bot_tools.local.pubsub_emulator import free_loopback_port

MAX_MESSAGE_BYTES = 10_000_000  # Pub/Sub's limit on one message
SETTLE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Published:
    """One message on a topic, read as a tap reads it (``data``, ``attributes``...)."""

    topic: str
    data: bytes
    attributes: Mapping[str, str]
    ordering_key: str
    message_id: str
    publish_time: datetime


@dataclass
class MemoryDelivery:
    """A :class:`~llm_bot.transport.ack.Delivery` that records how the handler settled it."""

    data: bytes
    attributes: Mapping[str, str]
    message_id: str
    publish_time: datetime
    on_settle: Callable[[MemoryDelivery, str], None]
    delivery_attempt: int = 1
    settlements: list[str] = field(default_factory=list)

    async def ack(self) -> None:
        self._settle("ack")

    async def nack(self) -> None:
        self._settle("nack")

    def _settle(self, how: str) -> None:
        self.settlements.append(how)
        self.on_settle(self, how)

    def again(self) -> MemoryDelivery:
        """The same message delivered once more, as Pub/Sub does after a nack."""
        return replace(self, delivery_attempt=self.delivery_attempt + 1, settlements=[])


class MemoryPublisher:
    """Keeps each topic's messages until a tap takes them; refuses what Pub/Sub refuses (a
    topic that does not exist, attributes past its limits) as the real publisher reports it."""

    def __init__(self, topics: list[str]) -> None:
        self._unread: dict[str, deque[Published]] = {topic: deque() for topic in topics}
        self._ids = itertools.count(1)
        self.arrived = asyncio.Condition()

    def create_topic(self, topic: str) -> None:
        self._unread.setdefault(topic, deque())

    async def publish(
        self, topic: str, data: bytes, attributes: Mapping[str, str], ordering_key: str = ""
    ) -> str:
        problem = _refusal(topic in self._unread, data, attributes)
        if problem:
            raise PublishRejected(f"publish to {topic!r} refused: {problem}")
        message_id = f"published-{next(self._ids)}"
        message = Published(topic, data, dict(attributes), ordering_key, message_id, utc_now())
        async with self.arrived:
            self._unread[topic].append(message)
            self.arrived.notify_all()
        return message_id

    def unread(self, topic: str) -> deque[Published]:
        return self._unread[topic]


def _refusal(topic_exists: bool, data: bytes, attributes: Mapping[str, str]) -> str | None:
    if not topic_exists:
        return "404 topic not found"
    sizes = [len(k.encode()) + len(v.encode()) for k, v in attributes.items()]
    if len(data) + sum(sizes) > MAX_MESSAGE_BYTES or len(attributes) > MAX_ATTRIBUTES:
        return "400 message too large"
    if any(len(k.encode()) > MAX_ATTRIBUTE_KEY_BYTES for k in attributes):
        return "400 attribute key too long"
    if any(len(v.encode()) > MAX_ATTRIBUTE_BYTES for v in attributes.values()):
        return "400 attribute value too long"
    return None


class MemoryTap:
    """What reached a topic, taken in publication order (a tap of :class:`MemoryBus`)."""

    def __init__(self, bus: MemoryBus, topic: str) -> None:
        self._bus = bus
        self._topic = topic
        self.received: list[Published] = []

    async def take(self, count: int, timeout_s: float = 30.0) -> list[Published]:
        """The next ``count`` messages, as soon as they were published."""
        publisher = self._bus.publisher
        unread = publisher.unread(self._topic)
        try:
            async with asyncio.timeout(timeout_s), publisher.arrived:
                await publisher.arrived.wait_for(lambda: len(unread) >= count)
        except TimeoutError:
            raise AssertionError(
                f"{self._topic}: got {len(unread)} of {count} within {timeout_s}s"
            ) from None
        fresh = [unread.popleft() for _ in range(count)]
        self.received += fresh
        return fresh

    async def drain(self) -> list[Published]:
        """Everything not taken yet, once every delivery is settled (nothing more can come)."""
        await self._bus.settled()
        unread = self._bus.publisher.unread(self._topic)
        rest = list(unread)
        unread.clear()
        self.received += rest
        return rest


class Serving:
    """A handler taking the bus's deliveries, as a worker takes its subscription's."""

    def __init__(
        self,
        handler: EventHandler,
        stats: WorkerStats,
        max_in_flight: int,
        lease_failures: Counter[str],
    ) -> None:
        self.stats = stats
        self.lease_failures = lease_failures  # the handler's lease renewals that failed, by reason
        self._handler = handler
        self._max_in_flight = max_in_flight
        self._queue: deque[MemoryDelivery] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._handed: list[MemoryDelivery] = []
        self.escaped: list[BaseException] = []
        self.idle = asyncio.Event()
        self.idle.set()
        self.accepting = True

    def deliver(self, delivery: MemoryDelivery) -> None:
        self.idle.clear()
        self._queue.append(delivery)
        self.pump()

    def pump(self) -> None:
        while self.accepting and self._queue and len(self._tasks) < self._max_in_flight:
            delivery = self._queue.popleft()
            self._handed.append(delivery)
            task = asyncio.create_task(self._handler.handle(delivery))
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self.escaped.append(error)
        self.pump()
        if not (self._queue or self._tasks):
            self.idle.set()

    def unstarted(self) -> list[MemoryDelivery]:
        waiting, self._queue = list(self._queue), deque()
        return waiting

    async def stop(self, grace_s: float) -> None:
        """Stop taking work, give in-flight work ``grace_s``, cancel (nack) the rest; a
        delivery the handler let an exception escape from, or did not settle exactly once,
        fails the test."""
        self.accepting = False
        await finish_within(set(self._tasks), grace_s)
        assert not self.escaped, f"the handler raised: {self.escaped!r}"
        unsettled = [d.message_id for d in self._handed if len(d.settlements) != 1]
        assert not unsettled, f"not settled exactly once: {unsettled}"


class MemoryBus:
    """One handler's world in memory: topics named after ``prefix``, the worker's settings as
    variables (``environment``), and the messages published to its input topic."""

    def __init__(self, prefix: str, environment: Mapping[str, str]) -> None:
        self.prefix = prefix
        self.next_topic = f"{prefix}-next"
        self.egress_topic = f"{prefix}-egress"
        self.deadletter_topic = f"{prefix}-dlq"
        self.environment = {
            "LLM_BOT_INPUT_TOPIC": f"{prefix}-in",
            "LLM_BOT_SUBSCRIPTION": f"{prefix}-sub",
            "LLM_BOT_DEADLETTER_TOPIC": self.deadletter_topic,
            **environment,
        }
        self.publisher = MemoryPublisher(
            [self.next_topic, self.egress_topic, self.deadletter_topic]
        )
        self._ids = itertools.count(1)
        self._waiting: list[MemoryDelivery] = []  # published while no handler serves
        self._serving: Serving | None = None

    def settings(self, **overrides: str) -> Settings:
        values = {"PORT": str(free_loopback_port()), **self.environment, **overrides}
        return Settings(**values)  # type: ignore[arg-type]

    def tap(self, topic: str) -> MemoryTap:
        self.publisher.unread(topic)  # a topic of this bus
        return MemoryTap(self, topic)

    def deadletter_tap(self) -> MemoryTap:
        return self.tap(self.deadletter_topic)

    def publish_event(self, event: InternalEventV2) -> str:
        data, attributes = encode(event)
        return self.publish(data, attributes)

    def publish(self, data: bytes, attributes: Mapping[str, str]) -> str:
        """Publish to the input topic; the message id, which a dead letter names."""
        message_id = f"input-{next(self._ids)}"
        delivery = MemoryDelivery(data, dict(attributes), message_id, utc_now(), self._settled)
        self._deliver(delivery)
        return message_id

    def _deliver(self, delivery: MemoryDelivery) -> None:
        serving = self._serving
        if serving is not None and serving.accepting:
            serving.deliver(delivery)
        else:
            self._waiting.append(delivery)

    def _settled(self, delivery: MemoryDelivery, how: str) -> None:
        if how == "nack":
            self._deliver(delivery.again())

    async def settled(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Until no delivery waits for or is in the handler (at once when none serves)."""
        if self._serving is None:
            return
        try:
            await asyncio.wait_for(self._serving.idle.wait(), timeout_s)
        except TimeoutError:
            raise AssertionError(f"deliveries still unsettled after {timeout_s}s") from None

    @contextlib.asynccontextmanager
    async def serving(self, settings: Settings) -> AsyncIterator[Serving]:
        """The worker's handler on ``settings`` taking this bus's messages until the block
        ends; then stopped as the worker stops, and closed."""
        assert self._serving is None, "one handler serves a memory bus at a time"
        stats = WorkerStats()
        async with contextlib.AsyncExitStack() as resources:
            pool = await open_database(settings, resources)
            handler, _, leases = await open_handler(
                settings, pool, self.publisher, stats, resources
            )
            serving = Serving(handler, stats, settings.max_in_flight, leases.failures)
            self._serving = serving
            waiting, self._waiting = self._waiting, []
            for delivery in waiting:
                serving.deliver(delivery)
            try:
                yield serving
            finally:
                try:
                    await serving.stop(settings.shutdown_grace_s)
                finally:
                    self._serving = None
                    self._waiting += serving.unstarted()
