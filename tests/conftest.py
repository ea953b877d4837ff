"""Shared fixtures: the real Pub/Sub emulator and embedded Postgres, started once per session."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import uuid4

import pytest

from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator
from llm_bot_tools.local.pubsub_front import PubSubFront


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PubSubEmulator]:
    with PubSubEmulator(tmp_path_factory.mktemp("pubsub"), project="llm-bot-test") as emulator:
        yield emulator


@pytest.fixture(scope="session")
def pubsub_front(pubsub_emulator: PubSubEmulator) -> Iterator[PubSubFront]:
    """Where workers under test reach the emulator: it releases the stream of a worker that
    stopped or was killed, as real Pub/Sub does (see :mod:`llm_bot_tools.local.pubsub_front`)."""
    with PubSubFront(pubsub_emulator.host) as front:
        yield front


@pytest.fixture(scope="session")
def embedded_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    with EmbeddedPostgres(tmp_path_factory.mktemp("postgres") / "pgdata") as postgres:
        yield postgres


@pytest.fixture
def unique_name() -> str:
    """Pub/Sub and Postgres both accept this shape: starts with a letter, no dots."""
    return f"t-{uuid4().hex[:10]}"


@pytest.fixture
def fresh_database_url(embedded_postgres: EmbeddedPostgres, unique_name: str) -> Iterator[str]:
    url = embedded_postgres.create_database(unique_name)
    yield url
    embedded_postgres.drop_database(unique_name)
