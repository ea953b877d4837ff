"""Which memories reach the model, through the handler, with a threshold no hit reaches:
all of them while they fit the memory budget; beyond it, those sharing a word with the question
("peanuts" for "peanut-free"), asked in another thread than the one they were told in."""

from __future__ import annotations

import pytest

from llm_bot.memory.wiring import open_memory_store
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration

PEANUTS = "Alice is allergic to peanuts"
OTHERS = [f"Alice painted fence number {n} blue last summer" for n in range(12)]


async def model_request_for(
    bus: MemoryBus, model_server: LocalModelServer, memories: list[str], question: str
) -> str:
    async with open_memory_store(bus.settings()) as store:
        for content in memories:
            await store.for_user("alice").put(content)
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()):
        bus.publish_event(
            prompt_event(question, user="alice", thread="kitchen", egress_topic=bus.egress_topic)
        )
        await egress.take(1, timeout_s=30)
    (request,) = model_server.chat_requests()
    return str(request["messages"])


@pytest.fixture
def strict_bus(make_bus: BusFactory, migrated_database_url: str) -> MemoryBus:
    """No memory reaches 0.999 similarity; a memory block of about 100 tokens."""
    return make_bus(
        migrated_database_url,
        {"MEMORY_SIMILARITY_THRESHOLD": "0.999", "MEMORY_INJECTION_BUDGET": "100"},
    )


async def test_memories_that_fit_the_budget_all_reach_the_model(
    strict_bus: MemoryBus, model_server: LocalModelServer
) -> None:
    sent = await model_request_for(
        strict_bus, model_server, [PEANUTS, OTHERS[0]], "what should I cook tonight?"
    )
    assert PEANUTS in sent
    assert OTHERS[0] in sent


async def test_beyond_the_budget_a_shared_word_is_evidence(
    strict_bus: MemoryBus, model_server: LocalModelServer
) -> None:
    sent = await model_request_for(
        strict_bus, model_server, [PEANUTS, *OTHERS], "any peanut-free dishes?"
    )
    assert PEANUTS in sent
    assert not any(other in sent for other in OTHERS)
