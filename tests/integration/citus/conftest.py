"""A worker's world on the Citus cluster: the worker tests' bus (``make_bus``: unique topics on
the session emulator, a local model server) on a database of the test's own on the cluster,
whatever ``--database`` says."""

from __future__ import annotations

import pytest

from llm_bot_tools.devstack.worker_harness import Bus

from ..conftest import BusFactory


@pytest.fixture
def citus_bus(make_bus: BusFactory, citus_database_url: str) -> Bus:
    """Redelivered, never dropped by the emulator; the worker's own limit is high enough that a
    node stopped for a while dead-letters nothing."""
    return make_bus(
        citus_database_url,
        {"LLM_BOT_SHUTDOWN_GRACE_S": "5", "LLM_BOT_MAX_DELIVERY_ATTEMPTS": "100"},
        max_delivery_attempts=100,
    )
