"""The design's memory scenarios (a user's facts, asked about in other words), with the real
local embedding model (all-MiniLM-L6-v2) and its calibrated threshold: the right fact comes back
first, and only for its owner."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from llm_bot.clock import utc_now
from llm_bot.llm.embeddings import CachingEmbedder, LocalEmbedder
from llm_bot.memory.context import PostgresMemoryRetriever
from llm_bot.memory.store import MemoryStore
from llm_bot.settings import CALIBRATED_THRESHOLDS

from ...conftest import DatabaseServer
from ...from_settings import context_limits, settings_for

pytestmark = pytest.mark.integration
THRESHOLD = CALIBRATED_THRESHOLDS["local"]

FACTS = [
    "I am vegetarian",
    "My time zone is America/New_York",
    "My name is Sam Rivera",
    "I love thriller movies",
    "My birthday is on 14 February",
    "I work at Microsoft as a product manager",
]
SCENARIOS = [
    ("Can you suggest something for dinner, maybe a burger?", "I am vegetarian"),
    ("What time is it for me right now?", "My time zone is America/New_York"),
    ("What is my name?", "My name is Sam Rivera"),
    ("What kind of films do I like?", "I love thriller movies"),
    ("When is my birthday?", "My birthday is on 14 February"),
    ("Which company do I work for?", "I work at Microsoft as a product manager"),
]


@pytest.fixture(scope="module")
async def local_store(
    database_server: DatabaseServer, migrated_template: str
) -> AsyncIterator[MemoryStore]:
    url = database_server.create_database("seed_scenarios", migrated_template)
    try:
        async with MemoryStore.open(settings_for(url), CachingEmbedder(LocalEmbedder())) as store:
            for fact in FACTS:
                await store.for_user("sam").put(fact)
            await store.for_user("lee").put("I eat a lot of meat and love westerns")
            yield store
    finally:
        database_server.drop_database("seed_scenarios")


@pytest.mark.parametrize(
    ("query", "expected"), SCENARIOS, ids=[e.split()[-1] for _, e in SCENARIOS]
)
async def test_the_right_memory_comes_back_first(
    local_store: MemoryStore, query: str, expected: str
) -> None:
    hits = await local_store.for_user("sam").search(query, limit=5, threshold=THRESHOLD)
    assert hits, f"nothing above {THRESHOLD} for {query!r}"
    assert hits[0].content == expected


async def test_another_user_never_sees_them(local_store: MemoryStore) -> None:
    for query, _ in SCENARIOS:
        hits = await local_store.for_user("lee").search(query, limit=10, threshold=-1.0)
        assert {hit.content for hit in hits} <= {"I eat a lot of meat and love westerns"}


@pytest.mark.parametrize(
    "question",
    [
        "We're ordering pizza tonight, what should I get?",
        "What should I order?",
        "Recommend a restaurant dish for me",
    ],
)
async def test_the_model_is_told_what_matters_for_an_order(
    local_store: MemoryStore, question: str
) -> None:
    """The design's pizza scenario at the shipped threshold: "I am vegetarian" scores under it
    against such questions, but Sam's memories fit the injection budget, so all are shown."""
    limits = context_limits(threshold=THRESHOLD)
    retriever = PostgresMemoryRetriever(local_store, limits, "bot", utc_now)
    memory_context = await retriever.retrieve("sam", "cli:kitchen", question, private=True)
    shown = "\n".join(message.content for message in memory_context.messages)
    assert "I am vegetarian" in shown
    assert "westerns" not in shown  # lee's
