"""`llm-bot reembed` moves memories and history to a new embedding model while a worker serves:
no event fails, the old model's worker keeps answering after the switch, and a worker on the new
model recalls what was said before it."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import AsyncConnection

from llm_bot.db.embedding_space import EmbeddingModelMismatch
from llm_bot.lifecycle.reembed import reembed
from llm_bot.llm.embeddings import embedder_from_settings
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration

OLD = {"MEMORY_EMBEDDING_MODEL": "embedder-a", "MEMORY_EMBEDDING_DIMENSIONS": "48"}
NEW = {"MEMORY_EMBEDDING_MODEL": "embedder-b", "MEMORY_EMBEDDING_DIMENSIONS": "80"}
FACT = "my favourite volcano is Eyjafjallajokull"


@pytest.fixture
def old_model_bus(make_bus: BusFactory, migrated_database_url: str) -> MemoryBus:
    settings = {**OLD, "MEMORY_SIMILARITY_THRESHOLD": "0.1", "LLM_BOT_SHUTDOWN_GRACE_S": "5"}
    return make_bus(migrated_database_url, settings)


def chatter(bus: MemoryBus, count: int, label: str) -> list[str]:
    """Publish ``count`` prompts of several users; returns their correlation ids."""
    ids = []
    for n in range(count):
        text = f"{label} message {n} about gardening and tea"
        event = prompt_event(
            text, user=f"u{n % 3}", thread=f"room-{n % 4}", egress_topic=bus.egress_topic
        )
        bus.publish_event(event)
        ids.append(event.correlation_id)
    return ids


async def test_reembed_switches_models_while_a_worker_serves(
    old_model_bus: MemoryBus, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    bus = old_model_bus
    egress, deadletters = bus.tap(bus.egress_topic), bus.deadletter_tap()
    new_embedder = embedder_from_settings(bus.settings(**NEW))
    progress: list[str] = []
    async with bus.serving(bus.settings()) as old_worker:
        fact = prompt_event(FACT, user="una", thread="garden", egress_topic=bus.egress_topic)
        bus.publish_event(fact)
        published = [fact.correlation_id, *chatter(bus, 20, "before")]
        await egress.take(len(published), timeout_s=60)

        published += chatter(bus, 30, "during")  # served while the vectors move
        async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
            report = await reembed(db, new_embedder, batch=4, progress=progress.append)
        published += chatter(bus, 10, "after")  # the old model's worker, after the switch
        received = await egress.take(len(published) - 21, timeout_s=90)
        assert old_worker.stats.outcome_ok == len(published)
        assert old_worker.stats.nacked == old_worker.stats.dead_lettered == 0
    assert await deadletters.drain() == []
    assert {json.loads(m.data)["correlationId"] for m in received} == set(published[21:])
    assert report.switched
    assert (report.model, report.dimensions) == ("embedder-b", 80)
    assert any(line.startswith("switched") for line in progress), progress

    # The old model's worker wrote its turns after the switch without vectors (none of the
    # wrong model); a second run gives them vectors.
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
        cursor = await db.execute("SELECT count(*) FROM conversation_turns WHERE embedding IS NULL")
        without = (await cursor.fetchone() or [0])[0]
        filled = await reembed(db, new_embedder, batch=16, progress=progress.append)
    assert not filled.switched
    assert without >= 2 * 10
    assert filled.vectors == without
    with psycopg.connect(migrated_database_url) as db:
        dims = db.execute(
            "SELECT count(*), count(embedding), min(vector_dims(embedding)),"
            " max(vector_dims(embedding)) FROM conversation_turns"
        ).fetchone()
        assert dims == (2 * len(published), 2 * len(published), 80, 80)
        space = db.execute("SELECT model, dimensions, next_model FROM embedding_space").fetchone()
        assert space == ("embedder-b", 80, None)

    with pytest.raises(EmbeddingModelMismatch, match=r"embedder-b.*`llm-bot reembed`"):
        async with bus.serving(bus.settings()):
            pass

    model_server.clear()
    async with bus.serving(bus.settings(**NEW)):
        question = prompt_event(
            "which volcano do I like?", user="una", thread="travel", egress_topic=bus.egress_topic
        )
        bus.publish_event(question)
        [answer] = await egress.take(1)
    assert json.loads(answer.data)["correlationId"] == question.correlation_id
    [request] = model_server.chat_requests()
    assert "Eyjafjallajokull" in json.dumps(request["messages"])
    await new_embedder.close()
