"""``deleteMemory`` through the graph: the model forgets a memory it was shown, by its key, at
the event's commit; a key that is not the user's is an answer to the model, never a deletion."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
import pytest
from psycopg import sql

from llm_bot.clock import utc_now
from llm_bot.events.inbound import inbound_of
from llm_bot.lifecycle.reembed import reembed
from llm_bot.llm.client import ModelClient
from llm_bot.llm.embeddings import Embedder
from llm_bot.memory.commit import MemoryCommit, Pair
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.tools import DeleteMemoryTool
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.answering import answer_event
from ..conftest import server_embedder
from .graph_run import (
    GRAPH,
    answerer_for,
    commit,
    context_for,
    first_request,
    said,
    tool_results,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_servers")]
# Shares "user" and "is" with the memories below, so they are found, and never names the diet.
QUESTION = "what does the user eat, is the user picky?"


async def test_the_model_forgets_a_memory_by_its_key_and_it_is_never_shown_again(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    context = context_for(memory_store, model)
    mira = memory_store.for_user("mira")
    key, _ = await mira.put("User is vegetarian")
    await answer_event(GRAPH, context, said("mira", "thread-a", QUESTION))
    assert f'- [{key}] "User is vegetarian"' in first_request(chat_server), "shown, with its key"

    chat_server.reset()
    chat_server.script_tool_call("deleteMemory", {"key": key})
    forget = said("mira", "thread-b", "please forget what you know about my diet")
    answerer = answerer_for(memory_store, model)
    answer = await answerer.answer(inbound_of(forget))
    assert tool_results(chat_server) == [f"deleted memory {key}"]
    assert await mira.get(key) is not None, "nothing is deleted before the event's commit"
    await commit(answerer, answer)
    assert await mira.get(key) is None

    chat_server.reset()
    await answer_event(GRAPH, context, said("mira", "thread-c", QUESTION))
    assert "vegetarian" not in first_request(chat_server)


async def test_an_unknown_key_or_another_users_key_is_an_answer_and_deletes_nothing(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    otto_key, _ = await memory_store.for_user("otto").put("User is allergic to nuts")
    mira_key, _ = await memory_store.for_user("mira").put("User is vegetarian")
    chat_server.script_tool_calls(
        [
            ("deleteMemory", {"key": otto_key}),
            ("deleteMemory", {"key": "no-such-key"}),
            ("deleteMemory", {"key": 42}),
        ]
    )
    answerer = answerer_for(memory_store, model)
    answer = await answerer.answer(inbound_of(said("mira", "thread-a", "forget otto's allergy")))
    assert answer.outcome == "OK"
    assert tool_results(chat_server) == [
        f"error: no memory with key {otto_key}; nothing deleted",
        "error: no memory with key no-such-key; nothing deleted",
        "error: nothing deleted: key must be the key of a memory you were shown",
    ]
    await commit(answerer, answer)
    otto = await memory_store.for_user("otto").get(otto_key)
    assert otto is not None
    assert otto.content == "User is allergic to nuts"
    assert await memory_store.for_user("mira").get(mira_key) is not None


async def test_a_commit_deletes_only_its_own_users_memories(memory_store: MemoryStore) -> None:
    """Even a deletion recorded without the tool's check cannot reach another user."""
    otto_key, _ = await memory_store.for_user("otto").put("User is allergic to nuts")
    writes = RunWrites("mira")
    writes.delete_memory(otto_key)
    pair = Pair("event-1", "chat:room", "mira", "hi", "hello", utc_now(), writes)
    await MemoryCommit.from_settings(memory_store, load_settings()).commit_now(pair)
    assert await memory_store.for_user("otto").get(otto_key) is not None


async def test_within_one_run_the_later_call_on_a_key_wins(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    mira = memory_store.for_user("mira")
    updated_then_deleted, _ = await mira.put("User drinks tea")
    deleted_then_updated, _ = await mira.put("User lives in Oslo")
    deleted_then_resaved, _ = await mira.put("User is vegetarian")
    chat_server.script_tool_calls(
        [
            ("upsertMemory", {"key": updated_then_deleted, "content": "User drinks coffee"}),
            ("deleteMemory", {"key": deleted_then_updated}),
            ("deleteMemory", {"key": deleted_then_resaved}),
        ]
    )
    chat_server.script_tool_calls(
        [
            ("deleteMemory", {"key": updated_then_deleted}),
            ("upsertMemory", {"key": deleted_then_updated, "content": "User lives in Bergen"}),
            ("upsertMemory", {"content": "User is vegetarian"}),  # its deleted twin: no merge
        ]
    )
    answerer = answerer_for(memory_store, model)
    answer = await answerer.answer(inbound_of(said("mira", "thread-a", "a change of habits")))
    resaved = tool_results(chat_server)[-1]
    assert resaved.endswith("(created)")
    await commit(answerer, answer)

    assert await mira.get(updated_then_deleted) is None
    moved = await mira.get(deleted_then_updated)
    assert moved is not None
    assert moved.content == "User lives in Bergen"
    assert await mira.get(deleted_then_resaved) is None
    contents = sorted(memory.content for memory in await mira.list_memories())
    assert contents == ["User is vegetarian", "User lives in Bergen"]


async def test_within_one_run_a_fact_saved_again_is_the_same_memory(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    """As a fact saved again in a later message is merged into its twin: a model repeating a
    call (or steered to) made one memory per call, up to the event's bound on writes."""
    chat_server.script_tool_calls([("upsertMemory", {"content": "User drinks tea"})] * 3)
    chat_server.script_tool_calls(
        [("upsertMemory", {"content": "User drinks tea", "metadata": {"kind": "habit"}})]
    )
    answerer = answerer_for(memory_store, model)
    answer = await answerer.answer(inbound_of(said("mira", "thread-a", "tea, every morning")))
    await commit(answerer, answer)

    [memory] = await memory_store.for_user("mira").list_memories()
    assert (memory.content, memory.metadata) == ("User drinks tea", {"kind": "habit"})
    [key] = {result.split()[2] for result in tool_results(chat_server)}
    assert key == memory.key


class DownAfter:
    """A new embedding model whose endpoint goes down after ``calls`` requests: a re-embedding
    stops half way, with the memories' ``embedding_next`` partly filled."""

    model = "next-embeddings"

    def __init__(self, inner: Embedder, calls: int) -> None:
        self._inner = inner
        self._calls = calls

    async def dimensions(self) -> int:
        return await self._inner.dimensions()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._calls == 0:
            raise ConnectionError("embeddings endpoint down")
        self._calls -= 1
        return await self._inner.embed(texts)


def vector_rows(url: str, column: str, key: str) -> int:
    """Memories ``key`` with a vector in ``column``."""
    with psycopg.connect(url) as connection:
        row = connection.execute(
            sql.SQL("SELECT count(*) FROM memories WHERE key = %s AND {} IS NOT NULL").format(
                sql.Identifier(column)
            ),
            (key,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_deleted_memory_leaves_no_vector_in_a_reembedding_under_way(
    memory_store: MemoryStore, embedding_server: LocalModelServer, migrated_database_url: str
) -> None:
    mira = memory_store.for_user("mira")
    await mira.put("User is vegetarian", key="a-forgotten")
    await mira.put("User lives in Oslo", key="b-kept")
    new_model = DownAfter(server_embedder(embedding_server, dimensions=64), calls=1)
    async with await psycopg.AsyncConnection.connect(
        migrated_database_url, autocommit=True
    ) as connection:
        with pytest.raises(ConnectionError):
            await reembed(connection, new_model, batch=1, progress=lambda _: None)
    assert vector_rows(migrated_database_url, "embedding_next", "a-forgotten") == 1

    writes = RunWrites("mira")
    assert await DeleteMemoryTool(memory_store).run({"key": "a-forgotten"}, writes) == (
        "deleted memory a-forgotten"
    )
    pair = Pair("event-1", "chat:room", "mira", "forget it", "done", utc_now(), writes)
    await MemoryCommit.from_settings(memory_store, load_settings()).commit_now(pair)
    assert vector_rows(migrated_database_url, "embedding_next", "a-forgotten") == 0
    assert vector_rows(migrated_database_url, "embedding", "a-forgotten") == 0
    assert await mira.get("b-kept") is not None
