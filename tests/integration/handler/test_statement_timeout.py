"""A retrieval statement that meets MEMORY_STATEMENT_TIMEOUT_MS costs the event that part of
its context and nothing else, through the handler: the notes table is locked by another
session, so the worker's read of the notes (with the window, in one statement) waits until the
server ends it; the window is then read alone, the answer comes, and the thread's window reaches
the model. Without the timeout, the read would wait out the whole retrieval's deadline, and the
event would lose every part of its context."""

from __future__ import annotations

import psycopg
import pytest

from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration


@pytest.fixture
def timed_bus(make_bus: BusFactory, migrated_database_url: str) -> MemoryBus:
    """Statements end after 1 s; retrieval as a whole after its default 5 s."""
    return make_bus(migrated_database_url, {"MEMORY_STATEMENT_TIMEOUT_MS": "1000"})


async def test_a_timed_out_statement_costs_its_part_of_the_context_only(
    timed_bus: MemoryBus, model_server: LocalModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    bus = timed_bus
    egress = bus.tap(bus.egress_topic)
    url = bus.environment["DATABASE_URL"]
    async with bus.serving(bus.settings()):
        told = prompt_event(
            "my cat is called Tom", user="ana", thread="porch", egress_topic=bus.egress_topic
        )
        bus.publish_event(told)
        await egress.take(1, timeout_s=30)
        model_server.clear()
        async with await psycopg.AsyncConnection.connect(url) as locker:
            await locker.execute("LOCK TABLE agent_notes IN ACCESS EXCLUSIVE MODE")
            asked = prompt_event(
                "what is my cat called?", user="ana", thread="porch", egress_topic=bus.egress_topic
            )
            bus.publish_event(asked)
            [answer] = await egress.take(1, timeout_s=30)
            await locker.rollback()
    assert asked.correlation_id.encode() in answer.data
    [request] = model_server.chat_requests()
    assert "my cat is called Tom" in str(request["messages"])  # the window, read beside the notes
    failed = [r for r in caplog.records if r.getMessage().startswith("memory retrieval failed")]
    assert [
        (r.__dict__.get("part"), "QueryCanceled" in r.__dict__.get("cause", "")) for r in failed
    ] == [("notes and window", True)]  # the window then read alone
