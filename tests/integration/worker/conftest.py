"""A worker's world per test: unique topics and subscriptions on the session emulator, a fresh
database and a local model server (see :class:`llm_bot.testing.worker_harness.Bus`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_bot.testing.openai_server import LocalModelServer
from llm_bot.testing.pubsub_emulator import PubSubEmulator
from llm_bot.testing.worker_harness import Bus, model_environment


@pytest.fixture
def model_server() -> Iterator[LocalModelServer]:
    with LocalModelServer() as server:
        yield server


@pytest.fixture
def bus(
    pubsub_emulator: PubSubEmulator,
    unique_name: str,
    fresh_database_url: str,
    model_server: LocalModelServer,
) -> Iterator[Bus]:
    environment = {
        "DATABASE_URL": fresh_database_url,
        "LLM_BOT_SHUTDOWN_GRACE_S": "5",
        **model_environment(model_server),
    }
    # The emulator drops (never dead-letters) a message past max delivery attempts, and it can
    # spend attempts redelivering to a killed worker's stream; the worker's own limit
    # (LLM_BOT_MAX_DELIVERY_ATTEMPTS) is what these tests exercise.
    bus = Bus(
        pubsub_emulator,
        unique_name,
        environment,
        ack_deadline_seconds=10,
        max_delivery_attempts=100,
    )
    yield bus
    bus.close()
