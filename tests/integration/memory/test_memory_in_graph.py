"""Long-term memory through the graph: saved by the model's tool call, recalled elsewhere,
isolated per user, and never a reason to fail an event."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection

from llm_bot.answer.unit import Answer, Answerer, Writes
from llm_bot.clock import utc_now
from llm_bot.db.batches import Work
from llm_bot.db.embedding_space import space_for_write
from llm_bot.db.migrate import migrate
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.assembly import graph_from_settings
from llm_bot.graph.state import GraphContext
from llm_bot.llm.client import ModelClient
from llm_bot.llm.embeddings import CachingEmbedder
from llm_bot.memory.commit import MemoryCommit, Pair
from llm_bot.memory.context import PostgresMemoryRetriever
from llm_bot.memory.notes_store import ManageNotesTool
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.tools import UpsertMemoryTool
from llm_bot.settings import load_settings
from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...from_settings import context_limits, graph_context, settings_for
from ...support.answering import answer_event
from ..conftest import running_committer, server_embedder

pytestmark = pytest.mark.integration
GRAPH = graph_from_settings(load_settings())


@pytest.fixture(autouse=True)
def fresh_servers(chat_server: LocalModelServer, embedding_server: LocalModelServer) -> None:
    chat_server.reset()
    embedding_server.reset()


def context_for(store: MemoryStore, model: ModelClient, timeout_s: float = 5.0) -> GraphContext:
    limits = context_limits(threshold=0.2)
    return graph_context(
        model,
        retriever=PostgresMemoryRetriever(store, limits, "llm-bot", utc_now),
        memory_tools=[UpsertMemoryTool(store, max_tokens=2048, max_memories=0)],
        system_prompt="system",
        retrieval_timeout_s=timeout_s,
    )


async def run_and_commit(
    store: MemoryStore, context: GraphContext, event: InternalEventV2
) -> Answer:
    """What the worker does with an event's writes, minus the bus."""
    answerer = Answerer(GRAPH, context, MemoryCommit.from_settings(store, load_settings()))
    answer = await answerer.answer(inbound_of(event))
    await answerer.commit(answer)
    return answer


def said(user: str, thread: str, text: str) -> InternalEventV2:
    return prompt_event(text, user=user, thread=thread, egress_topic="internal.egress.v1")


def context_sent(server: LocalModelServer) -> str:
    """The text of every message of the last request, as the model reads it."""
    return "\n".join(m["content"] or "" for m in server.chat_requests()[-1]["messages"])


async def test_a_fact_told_in_one_thread_reaches_the_model_in_another_but_not_for_others(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    context = context_for(memory_store, model)
    save = {"content": "Mira is vegetarian and never eats meat", "metadata": {"topic": "food"}}
    tell = said("mira", "thread-a", f"remember this [[tool:upsertMemory {json.dumps(save)}]]")
    told = await run_and_commit(memory_store, context, tell)
    assert told.outcome == "OK"
    tool_results = [m for m in chat_server.chat_requests()[-1]["messages"] if m["role"] == "tool"]
    assert tool_results[0]["content"].startswith("saved memory ")

    await answer_event(
        GRAPH, context, said("mira", "thread-b", "is mira vegetarian or does she eat meat?")
    )
    assert "Relevant memories (" in context_sent(chat_server)
    assert '"Mira is vegetarian and never eats meat" {"topic": "food"}' in context_sent(chat_server)

    await answer_event(
        GRAPH, context, said("otto", "thread-b", "is mira vegetarian or does she eat meat?")
    )
    assert "vegetarian and never eats meat" not in context_sent(chat_server)
    assert "Relevant memories" not in context_sent(chat_server)


async def test_events_committed_together_keep_every_memory_note_and_turn(
    memory_store: MemoryStore, model: ModelClient, migrated_database_url: str
) -> None:
    """The worker's path: the writes of several events in one pipelined group commit, two of
    them in the same thread (their history pairs must follow each other)."""
    context = context_for(memory_store, model)
    told = [("ada", "lobby", "cello"), ("bo", "lobby", "tuba"), ("cy", "den", "harp")]
    answerer = Answerer(GRAPH, context, MemoryCommit.from_settings(memory_store, load_settings()))
    answers = []
    for user, thread, instrument in told:
        save = json.dumps({"content": f"{user} plays the {instrument}"})
        answers.append(
            await answerer.answer(
                inbound_of(said(user, thread, f"remember [[tool:upsertMemory {save}]]"))
            )
        )
    writes = [await answerer.prepare(answer) for answer in answers]

    def work(writes: Writes) -> Work:
        """The writes after the embedding space's guard, as the worker's store takes it."""

        async def apply(connection: AsyncConnection[Any]) -> None:
            await writes.apply(connection, await space_for_write(connection))

        return apply

    async with running_committer(migrated_database_url, max_batch=8, max_delay_s=0.05) as committer:
        await asyncio.gather(*(committer.commit(work(w), w.keys) for w in writes))
    assert committer.transactions == 1
    for user, _, instrument in told:
        hits = await memory_store.for_user(user).search(
            f"what does {user} play?", limit=3, threshold=0.0
        )
        assert [hit.content for hit in hits] == [f"{user} plays the {instrument}"]
    async with await psycopg.AsyncConnection.connect(migrated_database_url) as connection:
        cursor = await connection.execute(
            "SELECT thread_id, array_agg(seq ORDER BY seq) FROM conversation_turns GROUP BY 1"
        )
        seqs = dict(await cursor.fetchall())
    lobby, den = answers[0].pair, answers[2].pair
    assert lobby is not None
    assert den is not None
    assert seqs == {lobby.thread_id: [1, 2, 3, 4], den.thread_id: [1, 2]}


async def test_an_invalid_memory_goes_back_to_the_model_and_the_event_succeeds(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    bad = {"content": "x", "metadata": {"userId": "someone-else"}}
    result = await answer_event(
        GRAPH,
        context_for(memory_store, model),
        said("nina", "t", f"[[tool:upsertMemory {json.dumps(bad)}]]"),
    )
    tool_results = [m for m in chat_server.chat_requests()[-1]["messages"] if m["role"] == "tool"]
    assert (
        tool_results[0]["content"] == "error: memory not saved: metadata key 'userId' is reserved"
    )
    assert result.outcome == "OK"
    assert await memory_store.for_user("nina").list_memories() == []


@pytest.mark.parametrize("fault", ["failing", "slow"])
async def test_embeddings_failing_or_slow_degrade_to_no_memories(
    memory_store: MemoryStore,
    model: ModelClient,
    embedding_server: LocalModelServer,
    fault: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await memory_store.for_user("omar").put("Omar likes sailing")
    if fault == "failing":
        embedding_server.fail_next(100, status=500, kind="embeddings")
    else:
        embedding_server.hang_next(100, seconds=3, kind="embeddings")
    with caplog.at_level(logging.WARNING):
        result = await answer_event(
            GRAPH,
            context_for(memory_store, model, timeout_s=0.5),
            said("omar", "t", "any hobby tips?"),
        )
    assert result.outcome == "OK"
    assert result.candidate is not None
    failures = [r for r in caplog.records if r.message.startswith("memory retrieval failed")]
    assert failures
    assert failures[0].__dict__["userId"] == "omar"


async def test_postgres_down_degrades_to_no_memories(
    tmp_path: Path,
    model: ModelClient,
    embedding_server: LocalModelServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    postgres = EmbeddedPostgres(tmp_path / "pg").start()
    migrate(postgres.url)
    embedder = CachingEmbedder(server_embedder(embedding_server))
    try:
        settings = settings_for(postgres.url, MEMORY_RETRIEVAL_TIMEOUT_MS=500)
        async with MemoryStore.open(settings, embedder) as store:
            await store.for_user("pia").put("Pia collects stamps")
            postgres.stop()
            with caplog.at_level(logging.WARNING):
                result = await answer_event(
                    GRAPH, context_for(store, model, timeout_s=1.0), said("pia", "t", "stamps?")
                )
    finally:
        postgres.stop()
    assert result.outcome == "OK"
    assert result.candidate is not None
    assert any(r.message.startswith("memory retrieval failed") for r in caplog.records)


async def test_history_keeps_a_long_message_cut_to_its_bound(
    memory_store: MemoryStore, migrated_database_url: str, embedding_server: LocalModelServer
) -> None:
    """A prompt may be as long as a Pub/Sub message; history keeps its first HISTORY_MAX_CHARS
    characters, and that is also what is embedded."""
    pair = Pair("event-1:0:llm-bot", "cli:den", "ada", "w " * 10_000, "ok", utc_now(), None)
    settings = load_settings(HISTORY_MAX_CHARS=300)
    await MemoryCommit.from_settings(memory_store, settings).commit_now(pair)
    with psycopg.connect(migrated_database_url) as connection:
        lengths = connection.execute(
            "SELECT role, length(content) FROM conversation_turns ORDER BY role"
        ).fetchall()
    assert lengths == [("assistant", 2), ("user", 300)]
    embedded = [r.body for r in embedding_server.requests if r.body and "input" in r.body]
    assert all(len(text) <= 300 for body in embedded for text in body["input"])


async def test_in_a_shared_channel_each_user_turn_names_its_speaker(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    context = context_for(memory_store, model)
    await run_and_commit(memory_store, context, said("ada.l", "lobby", "I brought the cake"))
    await run_and_commit(memory_store, context, said("bo", "lobby", "I brought the tea"))
    await run_and_commit(memory_store, context, said("ada.l", "lobby", "who brought the tea?"))
    *window, asking = [
        m for m in chat_server.chat_requests()[-1]["messages"] if m["role"] == "user"
    ]
    assert [(m["name"], m["content"]) for m in window] == [
        ("ada_l", '"ada.l" said: "I brought the cake"'),
        ("bo", '"bo" said: "I brought the tea"'),
    ]
    assert asking["name"] == "ada_l"


def said_privately(user: str, channel: str, text: str) -> InternalEventV2:
    event = said(user, channel, text)
    event.egress.type = "dm"
    return event


async def test_a_dm_has_no_labels(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    context = context_for(memory_store, model)
    await run_and_commit(memory_store, context, said_privately("ada", "ada-dm", "hello"))
    await run_and_commit(memory_store, context, said_privately("ada", "ada-dm", "again"))
    sent = chat_server.chat_requests()[-1]["messages"]
    assert {"role": "user", "content": "hello"} in sent
    assert not any(m.get("name") for m in sent)


async def test_what_is_learned_in_a_dm_never_reaches_a_shared_channel_but_does_reach_dms(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    """The memory, the notes and the DM's own turns (recall) all stay private."""
    context = context_for(memory_store, model)
    context = replace(
        context,
        memory_tools=[*context.memory_tools, ManageNotesTool(memory_store, "llm-bot", 8000)],
    )
    memory = json.dumps({"content": "the door code of Ada is 4242"})
    note = json.dumps({"operation": "append", "content": "Ada's door code: 4242"})
    cues = f"[[tool:upsertMemory {memory}]] [[tool:manage_long_term_memory {note}]]"
    secret = f"my door code is 4242 {cues}"
    await run_and_commit(memory_store, context, said_privately("ada", "dm-1", secret))
    for room in ("lobby", "den"):
        chat_server.reset()
        await run_and_commit(memory_store, context, said("ada", room, "what is my door code?"))
        assert "4242" not in context_sent(chat_server), f"a DM's fact reached #{room}"
    chat_server.reset()
    await run_and_commit(memory_store, context, said_privately("ada", "dm-2", "my door code?"))
    sent = context_sent(chat_server)
    assert "the door code of Ada is 4242" in sent, "the memory, in another DM"
    assert "Ada's door code: 4242" in sent, "the notes, in another DM"
