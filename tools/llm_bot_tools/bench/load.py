"""Load for ``llm-bot bench run``: prompt events in, arrivals out, timed on one clock.

Throughput and latency are measured in two phases because one load cannot show both: a
backlog of events published before the consumer starts shows how fast it drains (events/s),
while latency under a backlog is mostly time spent queueing. Latency is measured in a closed
loop instead: at most ``in_flight`` events outstanding, a new one published as each output
arrives, so it is the time one event takes at that concurrency. The raw transport (pull and
ack, nothing else) and the service are driven by the same code, so their figures compare.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message

from llm_bot.events.codec import encode
from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.prompt_events import prompt_event

PROGRESS_EVERY_S = 5.0
TEXT = "message {index}: what should I remember about tea, jazz and chess?"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Outgoing:
    correlation_id: str
    data: bytes
    attributes: dict[str, str]


def bench_events(
    prefix: str, count: int, users: int, threads: int, egress_topic: str
) -> list[Outgoing]:
    """``count`` prompts spread round-robin over ``users`` and ``threads``; ids are unique per
    run so the processed-event records never make one a duplicate of another."""
    return [
        outgoing(
            prompt_event(
                TEXT.format(index=index),
                user=f"user-{index % users}",
                thread=f"thread-{index % threads}",
                egress_topic=egress_topic,
                correlation_id=f"{prefix}-{index}",
            )
        )
        for index in range(count)
    ]


def outgoing(event: InternalEventV2) -> Outgoing:
    data, attributes = encode(event)
    return Outgoing(event.correlation_id, data, attributes)


class Arrivals:
    """Streaming-pulls a subscription and acks at once, noting when each correlation id first
    arrived. With ``max_messages`` set to the worker's in-flight limit it *is* the raw
    transport consumer; with a large one it is the egress tap."""

    def __init__(self, client: pubsub_v1.SubscriberClient, path: str, max_messages: int) -> None:
        self._client = client
        self._path = path
        self._flow_control = pubsub_v1.types.FlowControl(
            max_messages=max_messages, max_duration_per_lease_extension=10
        )
        self._condition = threading.Condition()
        self._future: pubsub_v1.subscriber.futures.StreamingPullFuture | None = None
        self.times: dict[str, float] = {}
        # Every message that carried each id: a redelivery has its message id, a copy another.
        self.message_ids: dict[str, set[str]] = {}
        self.on_arrival: Callable[[str], None] | None = None

    def start(self) -> None:
        self._future = self._client.subscribe(
            self._path, callback=self._on_message, flow_control=self._flow_control
        )

    def _on_message(self, message: Message) -> None:
        arrived = time.time()
        message.ack()
        correlation_id = message.attributes.get("correlationId", message.message_id)
        with self._condition:
            self.message_ids.setdefault(correlation_id, set()).add(message.message_id)
            if correlation_id in self.times:  # a redelivery or a copy: the first arrival counts
                return
            self.times[correlation_id] = arrived
            self._condition.notify_all()
        if self.on_arrival is not None:
            self.on_arrival(correlation_id)

    def wait_for(self, ids: Iterable[str], timeout_s: float, progress: Progress, what: str) -> None:
        """Block until every id arrived, reporting progress; raises TimeoutError."""
        wanted = set(ids)
        began = time.monotonic()
        deadline, next_report = began + timeout_s, began + PROGRESS_EVERY_S
        with self._condition:
            while missing := len(wanted - self.times.keys()):
                now = time.monotonic()
                if now >= deadline:
                    raise TimeoutError(f"{what}: {missing} of {len(wanted)} missing")
                if now >= next_report:
                    done = len(wanted) - missing
                    progress(f"{what}: {done}/{len(wanted)}, {done / (now - began):.1f}/s")
                    next_report = now + PROGRESS_EVERY_S
                self._condition.wait(min(1.0, deadline - now))

    def stop(self) -> None:
        if self._future is not None:
            self._future.cancel()
            self._future.result(timeout=10)


def publish_all(
    publisher: pubsub_v1.PublisherClient, topic_path: str, events: Iterable[Outgoing]
) -> None:
    """Publish without waiting for each confirmation (the client batches), then wait for all."""
    futures = [publisher.publish(topic_path, e.data, **e.attributes) for e in events]
    for future in futures:
        future.result(timeout=60)


def closed_loop_latencies_ms(
    publisher: pubsub_v1.PublisherClient,
    topic_path: str,
    events: list[Outgoing],
    arrivals: Arrivals,
    in_flight: int,
    timeout_s: float,
    progress: Progress,
) -> list[float]:
    """Publish ``events`` keeping at most ``in_flight`` of them unanswered; the latency of each
    is its arrival minus the moment just before its publish call."""
    slots = threading.Semaphore(in_flight)
    ours = {e.correlation_id for e in events}
    sent: dict[str, float] = {}

    def release(correlation_id: str) -> None:
        if correlation_id in ours:
            slots.release()

    arrivals.on_arrival = release
    try:
        for event in events:
            if not slots.acquire(timeout=timeout_s):
                raise TimeoutError("latency phase: no output came back")
            sent[event.correlation_id] = time.time()
            publisher.publish(topic_path, event.data, **event.attributes)
        arrivals.wait_for(ours, timeout_s, progress, "latency phase")
    finally:
        arrivals.on_arrival = None
    return [(arrivals.times[cid] - at) * 1000 for cid, at in sent.items()]


def percentiles_ms(values: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 (inclusive method, so small samples stay within the observed range)."""
    if len(values) < 2:
        only = values[0] if values else 0.0
        return only, only, only
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[94], cuts[98]
