"""The tests of what the event handler does: the worker's handler on a fresh database and a
local model server, its messages in memory (see ``tests/support/memory_bus.py``). The
transport's own tests and the end-to-end ones run on the emulator (``tests/integration/worker``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llm_bot_tools.devstack.worker_harness import model_environment
from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.memory_bus import MemoryBus

BusFactory = Callable[[str, dict[str, str]], MemoryBus]


@pytest.fixture
def make_bus(unique_name: str, model_server: LocalModelServer) -> BusFactory:
    """Builds this test's bus on ``database_url`` with extra worker ``settings``."""

    def make(database_url: str, settings: dict[str, str]) -> MemoryBus:
        environment = {"DATABASE_URL": database_url, **settings, **model_environment(model_server)}
        return MemoryBus(unique_name, environment)

    return make


@pytest.fixture
def bus(make_bus: BusFactory, migrated_database_url: str) -> MemoryBus:
    return make_bus(migrated_database_url, {"LLM_BOT_SHUTDOWN_GRACE_S": "5"})
