"""The worker's publisher against the emulator: messages published at the same instant arrive
once each under the ids it returned, one ordering key's in the order they were published, and
a message Pub/Sub refuses is refused alone, never the messages that shared its request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from google.cloud import pubsub_v1

from llm_bot.transport.clients import request_client, subscriber_client
from llm_bot.transport.publisher import (
    MAX_REQUEST_BYTES,
    MAX_REQUESTS_PER_TOPIC,
    Publisher,
    PublishRejected,
)
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator

pytestmark = pytest.mark.integration


@pytest.fixture
def subscriber(pubsub_emulator: PubSubEmulator) -> Iterator[pubsub_v1.SubscriberClient]:
    client = subscriber_client(pubsub_emulator.host)
    yield client
    client.close()


@pytest.fixture
async def publisher(pubsub_emulator: PubSubEmulator) -> AsyncIterator[Publisher]:
    publisher = Publisher(request_client(pubsub_emulator.host), pubsub_emulator.project)
    yield publisher
    await asyncio.to_thread(publisher.close)


@dataclass(frozen=True)
class Topic:
    name: str
    subscription: str  # its path; ordered


@pytest.fixture
def topic(
    pubsub_emulator: PubSubEmulator, subscriber: pubsub_v1.SubscriberClient, unique_name: str
) -> Topic:
    """The test's topic and its subscription, ordered."""
    client = request_client(pubsub_emulator.host)
    path = client.topic_path(pubsub_emulator.project, unique_name)
    client.create_topic(name=path)
    client.transport.close()
    subscription = subscriber.subscription_path(pubsub_emulator.project, unique_name)
    subscriber.create_subscription(
        request={"name": subscription, "topic": path, "enable_message_ordering": True}
    )
    return Topic(unique_name, subscription)


def received(
    subscriber: pubsub_v1.SubscriberClient, subscription: str, count: int
) -> list[pubsub_v1.types.PubsubMessage]:
    """``count`` messages of ``subscription`` in the order delivered, each acked as it comes
    (an ordered subscription delivers a key's next message once the one before is acked)."""
    messages: list[pubsub_v1.types.PubsubMessage] = []
    for _ in range(200):
        if len(messages) >= count:
            break
        response = subscriber.pull(
            request={"subscription": subscription, "max_messages": 100}, timeout=10
        )
        if response.received_messages:
            subscriber.acknowledge(
                request={
                    "subscription": subscription,
                    "ack_ids": [each.ack_id for each in response.received_messages],
                }
            )
        messages += [each.message for each in response.received_messages]
    return messages


async def test_messages_published_at_the_same_instant_arrive_once_each_under_their_ids(
    subscriber: pubsub_v1.SubscriberClient, publisher: Publisher, topic: Topic
) -> None:
    sent = [f"message {n}".encode() for n in range(300)]

    ids = await asyncio.gather(
        *(publisher.publish(topic.name, data, {"n": str(n)}) for n, data in enumerate(sent))
    )

    messages = await asyncio.to_thread(received, subscriber, topic.subscription, len(sent))
    assert sorted(message.data for message in messages) == sorted(sent)
    assert {message.message_id: message.data for message in messages} == dict(
        zip(ids, sent, strict=True)
    )


async def test_one_ordering_keys_messages_arrive_in_the_order_published(
    subscriber: pubsub_v1.SubscriberClient, publisher: Publisher, topic: Topic
) -> None:
    keys = [f"thread-{n}" for n in range(3 * MAX_REQUESTS_PER_TOPIC)]  # more than go at once
    sends = [(key, f"{key} {n}".encode()) for n in range(12) for key in keys]

    await asyncio.gather(*(publisher.publish(topic.name, data, {}, key) for key, data in sends))

    messages = await asyncio.to_thread(received, subscriber, topic.subscription, len(sends))
    for key in keys:
        published = [data for each, data in sends if each == key]
        assert [m.data for m in messages if m.ordering_key == key] == published, key


async def test_a_message_pubsub_refuses_is_refused_alone(
    subscriber: pubsub_v1.SubscriberClient, publisher: Publisher, topic: Topic
) -> None:
    """The emulator refuses a request holding an empty message, every message of it."""
    sent = [f"message {n}".encode() for n in range(20)]

    results = await asyncio.gather(
        *(publisher.publish(topic.name, data, {}) for data in sent[:10]),
        publisher.publish(topic.name, b"", {}),
        publisher.publish(topic.name, b"x" * (MAX_REQUEST_BYTES + 1), {}),
        publisher.publish("t-no-such-topic", b"lost", {}),
        *(publisher.publish(topic.name, data, {}) for data in sent[10:]),
        return_exceptions=True,
    )

    refused = results[10:13]
    assert all(isinstance(result, PublishRejected) for result in refused), refused
    confirmed = results[:10] + results[13:]
    assert all(isinstance(result, str) for result in confirmed), confirmed
    messages = await asyncio.to_thread(received, subscriber, topic.subscription, len(sent))
    assert sorted(message.data for message in messages) == sorted(sent)


async def test_a_refused_message_of_an_ordering_key_holds_back_none_of_the_rest(
    subscriber: pubsub_v1.SubscriberClient, publisher: Publisher, topic: Topic
) -> None:
    """A message refused for good is never published, so the key's later messages need not
    wait for it: they go out, in order."""
    sent = [f"message {n}".encode() for n in range(12)]
    datas = [*sent[:6], b"", *sent[6:]]

    results = await asyncio.gather(
        *(publisher.publish(topic.name, data, {}, "thread-a") for data in datas),
        return_exceptions=True,
    )

    assert isinstance(results[6], PublishRejected), results
    assert all(isinstance(result, str) for result in results[:6] + results[7:]), results
    messages = await asyncio.to_thread(received, subscriber, topic.subscription, len(sent))
    assert [message.data for message in messages] == sent
