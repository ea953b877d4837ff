"""What one worker holds of the database: at most LLM_BOT_DB_POOL_MAX + MEMORY_DB_POOL_MAX
connections however busy it is, so instances x that sum sizes the database (README, "Sizing
the database")."""

from __future__ import annotations

import psycopg
import pytest

from llm_bot_tools.devstack.worker_harness import Bus, running_worker
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = pytest.mark.integration

EVENTS = 24


def connections_of(database_url: str) -> int:
    """Client connections to the worker's database, this one left out, and on Citus the
    cluster's own between its nodes (its deadlock detection's)."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name NOT LIKE 'citus\\_internal %%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_busy_worker_stays_within_its_pool_settings(
    bus: Bus, model_server: LocalModelServer
) -> None:
    model_server.latency_ms = 200  # so the events overlap
    settings = bus.settings(
        LLM_BOT_MAX_IN_FLIGHT=str(EVENTS), LLM_BOT_DB_POOL_MAX="2", MEMORY_DB_POOL_MAX="2"
    )
    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    async with running_worker(settings):
        for i in range(EVENTS):
            bus.publish_event(
                prompt_event(f"hi {i}", user=f"u{i}", thread=f"t{i}", egress_topic=bus.egress_topic)
            )
        received = await bus.tap(bus.egress_topic).take(EVENTS, timeout_s=60)
        held = connections_of(url)  # pools keep what they opened for minutes
    assert len(received) == EVENTS
    assert 1 <= held <= 2 + 2
