"""The front workers under test reach the emulator through: calls pass as they are, errors too.
What it adds, releasing the stream of a worker that went away, is
``tests/integration/worker/test_released_streams.py``."""

from __future__ import annotations

import pytest
from google.api_core.exceptions import NotFound

from llm_bot_tools.devstack.worker_harness import Tap
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator, pubsub_clients
from llm_bot_tools.local.pubsub_front import PubSubFront

pytestmark = pytest.mark.integration


async def test_calls_and_their_errors_pass_through_unchanged(
    pubsub_emulator: PubSubEmulator, pubsub_front: PubSubFront, unique_name: str
) -> None:
    topology = pubsub_emulator.create_topology(
        input_topic=f"{unique_name}-in",
        subscription=f"{unique_name}-sub",
        deadletter_topic=f"{unique_name}-dlq",
    )
    through = pubsub_clients(pubsub_front.host)
    try:
        future = through.publisher.publish(topology.input_topic, b"payload", key="value")
        message_id = future.result(timeout=30)
        [message] = await Tap(through.subscriber, topology.input_subscription).take(1)
        missing = through.subscriber.subscription_path(pubsub_emulator.project, unique_name)
        with pytest.raises(NotFound):
            through.subscriber.get_subscription(subscription=missing, timeout=10)
    finally:
        through.close()
    assert (message.message_id, message.data, dict(message.attributes)) == (
        message_id,
        b"payload",
        {"key": "value"},
    )
