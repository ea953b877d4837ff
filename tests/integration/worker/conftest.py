"""A worker's world per test: unique topics and subscriptions on the session emulator, a fresh
database and a local model server (see :class:`llm_bot_tools.devstack.worker_harness.Bus`). Workers
reach the emulator through a front that releases the stream of a worker that stopped or died
(see :mod:`llm_bot_tools.local.pubsub_front`), as real Pub/Sub does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from llm_bot_tools.devstack.worker_harness import Bus, model_environment
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator
from llm_bot_tools.local.pubsub_front import PubSubFront

BusFactory = Callable[..., Bus]


@pytest.fixture
def make_bus(
    pubsub_emulator: PubSubEmulator,
    pubsub_front: PubSubFront,
    unique_name: str,
    model_server: LocalModelServer,
) -> Iterator[BusFactory]:
    """Builds this test's bus on ``database_url`` with extra worker ``settings``."""
    buses: list[Bus] = []

    def make(database_url: str, settings: dict[str, str], **bus_options: Any) -> Bus:
        environment = {
            "DATABASE_URL": database_url,
            "PUBSUB_EMULATOR_HOST": pubsub_front.host,
            **settings,
            **model_environment(model_server),
        }
        bus = Bus(pubsub_emulator, unique_name, environment, ack_deadline_seconds=10, **bus_options)
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        bus.close()


@pytest.fixture
def bus(make_bus: BusFactory, fresh_database_url: str) -> Bus:
    # The emulator drops (never dead-letters) a message past max delivery attempts; the
    # worker's own limit (LLM_BOT_MAX_DELIVERY_ATTEMPTS) is what these tests exercise.
    return make_bus(
        fresh_database_url, {"LLM_BOT_SHUTDOWN_GRACE_S": "5"}, max_delivery_attempts=100
    )
