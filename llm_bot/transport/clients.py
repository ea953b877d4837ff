"""Pub/Sub clients for real Pub/Sub or the emulator named by ``PUBSUB_EMULATOR_HOST``.

The emulator is reached over an explicit insecure channel instead of through the process
environment, so one process (a test, ``llm-bot dev``) can hold clients of several emulators
and settings loaded from anywhere mean the same thing.
"""

from __future__ import annotations

import grpc
from google.api_core.retry import Retry
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapicClient
from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports.grpc import SubscriberGrpcTransport

# Bounds of one publish including the client's own retries; the caller's wait is a bit longer.
PUBLISH_TIMEOUT_S = 30.0
PUBLISH_RETRY = Retry(initial=0.1, maximum=5.0, multiplier=2.0, timeout=PUBLISH_TIMEOUT_S)
# How long a batch of the client's batcher waits for company (its default is 10 ms).
PUBLISH_MAX_LATENCY_S = 0.002


def request_client(emulator_host: str | None) -> PublisherGapicClient:
    """The publisher's requests alone, without the client library's batcher: the worker's
    publisher (:mod:`llm_bot.transport.publisher`) batches what the loop queued itself."""
    if emulator_host is None:
        return PublisherGapicClient()
    transport = PublisherGrpcTransport(
        host=emulator_host, channel=grpc.insecure_channel(emulator_host)
    )
    return PublisherGapicClient(transport=transport)


def publisher_client(
    emulator_host: str | None, ordering: bool = False
) -> pubsub_v1.PublisherClient:
    """The client library's publisher, batching on its own threads, whose retries stop within
    ``PUBLISH_TIMEOUT_S``; ordering keys when asked. For publishing many messages at once
    (the benches, the tests' events, topics and subscriptions)."""
    options = pubsub_v1.types.PublisherOptions(
        enable_message_ordering=ordering, retry=PUBLISH_RETRY, timeout=PUBLISH_TIMEOUT_S / 3
    )
    batching = pubsub_v1.types.BatchSettings(max_latency=PUBLISH_MAX_LATENCY_S)
    if emulator_host is None:
        return pubsub_v1.PublisherClient(batching, publisher_options=options)
    transport = PublisherGrpcTransport(
        host=emulator_host, channel=grpc.insecure_channel(emulator_host)
    )
    return pubsub_v1.PublisherClient(batching, publisher_options=options, transport=transport)


def subscriber_client(emulator_host: str | None) -> pubsub_v1.SubscriberClient:
    if emulator_host is None:
        return pubsub_v1.SubscriberClient()
    transport = SubscriberGrpcTransport(
        host=emulator_host, channel=grpc.insecure_channel(emulator_host)
    )
    return pubsub_v1.SubscriberClient(transport=transport)
