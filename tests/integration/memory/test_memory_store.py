"""Per-user memories on a real Postgres: CRUD, upsert, dedup, search, isolation."""

from __future__ import annotations

import asyncio
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_bot.db.embedding_space import EmbeddingModelMismatch
from llm_bot.llm.embeddings import CachingEmbedder
from llm_bot.memory.store import MemoryStore
from llm_bot_tools.local.openai_server import LocalModelServer

from ...from_settings import settings_for
from ..conftest import server_embedder

pytestmark = pytest.mark.integration


async def test_put_get_list_delete(memory_store: MemoryStore) -> None:
    alice = memory_store.for_user("alice")
    key, outcome = await alice.put("Alice is vegetarian", {"topic": "food"})
    assert outcome == "created"
    assert len(key) == 13  # new_key's: every memory's line in the prompt shows it
    stored = await alice.get(key)
    assert stored is not None
    assert (stored.content, stored.metadata) == ("Alice is vegetarian", {"topic": "food"})
    assert [m.key for m in await alice.list_memories()] == [key]
    assert await alice.delete(key) is True
    assert await alice.get(key) is None
    assert await alice.delete(key) is False


async def test_upsert_by_key_is_idempotent_and_last_write_wins(memory_store: MemoryStore) -> None:
    bob = memory_store.for_user("bob")
    await bob.put("Bob lives in Oslo", key="home")
    await bob.put("Bob lives in Oslo", key="home")
    _, outcome = await bob.put("Bob lives in Bergen", key="home")
    assert outcome == "updated"
    memories = await bob.list_memories()
    assert [(m.key, m.content) for m in memories] == [("home", "Bob lives in Bergen")]


async def test_a_near_duplicate_updates_the_existing_memory(memory_store: MemoryStore) -> None:
    carol = memory_store.for_user("carol")
    first, _ = await carol.put("Carol's birthday is on 3 May")
    again, outcome = await carol.put("carol's birthday is on 3 may")
    other, other_outcome = await carol.put("Carol works as a nurse")
    assert (again, outcome) == (first, "merged")
    assert other != first
    assert other_outcome == "created"
    assert len(await carol.list_memories()) == 2


async def test_search_finds_relevant_memories_best_first(memory_store: MemoryStore) -> None:
    dave = memory_store.for_user("dave")
    await dave.put("Dave works at Microsoft in Dublin")
    await dave.put("Dave prefers tea over coffee")
    hits = await dave.search("where does dave work at microsoft", limit=5, threshold=0.1)
    assert hits[0].content == "Dave works at Microsoft in Dublin"
    assert all(hit.similarity >= 0.1 for hit in hits)
    lexical = await dave.search("microsoft", limit=5, threshold=-1.0, mode="lexical")
    assert [hit.content for hit in lexical] == ["Dave works at Microsoft in Dublin"]


# Ids chosen to collide under naive namespacing: prefixes, dots, LIKE wildcards, escapes.
user_ids = st.sampled_from(
    ["u1", "u10", "u1.0", "u1%2E0", "u_1", "u%1", "a.b", "a", "a%2Eb", "discord:42", "x\\y"]
) | st.text(alphabet=string.ascii_letters + string.digits + ".:%_-", min_size=1, max_size=8)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    facts=st.dictionaries(
        user_ids, st.sampled_from(["likes jazz", "likes tea", "has a dog"]), min_size=2, max_size=6
    )
)
def test_no_search_ever_returns_another_users_memory(
    facts: dict[str, str], migrated_database_url: str, embedding_server: LocalModelServer
) -> None:

    async def scenario() -> None:
        embedder = server_embedder(embedding_server)
        async with MemoryStore.open(
            settings_for(migrated_database_url), CachingEmbedder(embedder)
        ) as store:
            async with store.connection() as connection:
                await connection.execute("TRUNCATE memories")
            owner = {}
            for user, fact in facts.items():
                key, _ = await store.for_user(user).put(f"{fact} ({user})")
                owner[key] = user
            for user, fact in facts.items():
                for mode in ("hybrid", "dense", "lexical"):
                    hits = await store.for_user(user).search(
                        fact, limit=20, threshold=-1.0, mode=mode
                    )
                    assert {owner[hit.key] for hit in hits} <= {user}
                listed = await store.for_user(user).list_memories()
                assert {owner[m.key] for m in listed} == {user}
        await embedder.close()

    asyncio.run(scenario())


async def test_vectors_of_another_model_stop_start_up_with_instructions(
    migrated_database_url: str, embedding_server: LocalModelServer
) -> None:
    async with MemoryStore.open(
        settings_for(migrated_database_url), server_embedder(embedding_server)
    ) as store:
        await store.for_user("gina").put("Gina speaks Italian")
    smaller = server_embedder(embedding_server, dimensions=16)
    with pytest.raises(
        EmbeddingModelMismatch, match=r"\(384 dimensions\) .* \(16 dimensions\).*`llm-bot reembed`"
    ):
        async with MemoryStore.open(settings_for(migrated_database_url), smaller):
            pass
