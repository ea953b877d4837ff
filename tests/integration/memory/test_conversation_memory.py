"""Thread history, sessions, recall and notes through the graph and the commit, as the
worker runs them, on the real database: several store instances stand for several workers."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from llm_bot.answer.unit import Answer, Answerer
from llm_bot.clock import utc_now
from llm_bot.events.inbound import inbound_of
from llm_bot.events.models import InternalEventV2
from llm_bot.graph.assembly import graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.llm.embeddings import CachingEmbedder
from llm_bot.memory.budget import recall_candidates
from llm_bot.memory.commit import MemoryCommit
from llm_bot.memory.context import PostgresMemoryRetriever
from llm_bot.memory.notes_store import ManageNotesTool
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.window import PairRows, read_window, write_pair
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_payloads import spoken_text
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...from_settings import context_limits, graph_context, settings_for
from ..conftest import server_embedder

pytestmark = pytest.mark.integration
GRAPH = graph_from_settings(load_settings())
IDLE = timedelta(hours=6)
WINDOW_PAIRS = 4


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 1, 9, 0, tzinfo=utc_now().tzinfo)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(autouse=True)
def fresh_server(chat_server: LocalModelServer) -> None:
    chat_server.reset()


class Instance:
    """One worker's memory side: its own pool, retriever, tools and committer."""

    def __init__(
        self,
        store: MemoryStore,
        model: ModelClient,
        clock: Clock,
        pairs: int = 3,
        memory_budget: int = 1000,
    ) -> None:
        limits = context_limits(
            context_pairs=pairs,
            threshold=0.3,
            session_idle=IDLE,
            recall_budget_tokens=200,
            memory_budget_tokens=memory_budget,
        )
        self.store = store
        context = graph_context(
            model,
            retriever=PostgresMemoryRetriever(store, limits, "llm-bot", clock),
            memory_tools=[ManageNotesTool(store, "llm-bot", max_chars=300)],
            clock=clock,
        )
        commit = MemoryCommit.from_settings(store, load_settings())
        self.answerer = Answerer(GRAPH, context, commit)

    async def handle(self, event: InternalEventV2) -> Answer:
        answer = await self.answerer.answer(inbound_of(event))
        assert answer.pair is not None
        await self.answerer.commit(answer)
        return answer


def said(text: str, user: str = "uma", thread: str = "room") -> InternalEventV2:
    return prompt_event(text, user=user, thread=thread, egress_topic="internal.egress.v1")


def sent_contents(server: LocalModelServer) -> list[str]:
    return [spoken_text(m["content"]) for m in server.chat_requests()[-1]["messages"]]


async def test_forty_events_over_two_instances_and_a_restart_see_the_right_window(
    migrated_database_url: str,
    memory_store: MemoryStore,
    embedding_server: LocalModelServer,
    model: ModelClient,
    chat_server: LocalModelServer,
) -> None:
    clock = Clock()
    first = Instance(memory_store, model, clock)
    second_store = MemoryStore.open(
        settings_for(migrated_database_url), CachingEmbedder(server_embedder(embedding_server))
    )
    async with second_store as other:
        second = Instance(other, model, clock)
        for number in range(40):
            if number == 20:  # "restart": a brand-new instance takes over from here
                restarted = MemoryStore.open(
                    settings_for(migrated_database_url),
                    CachingEmbedder(server_embedder(embedding_server)),
                )
                second = Instance(await restarted.__aenter__(), model, clock)
            clock.now += timedelta(minutes=1)
            await (first if number % 2 == 0 else second).handle(said(f"message {number}"))
            window = [
                c
                for c in sent_contents(chat_server)
                if c.startswith(("message", "echo: message", '"uma" said: "message'))
            ]
            expected: list[str] = []
            for earlier in range(max(0, number - 3), number):
                expected += [f'"uma" said: "message {earlier}"', f"echo: message {earlier}"]
            assert window == [*expected, f"message {number}"], f"event {number}"
        await restarted.__aexit__(None, None, None)
    async with memory_store.connection() as connection:
        cursor = await connection.execute(
            "SELECT seq, role, pair_index FROM conversation_turns"
            " WHERE thread_id = 'cli:room' ORDER BY seq"
        )
        rows = await cursor.fetchall()
    assert [row["seq"] for row in rows] == list(range(1, 81))
    assert [row["pair_index"] for row in rows] == [n // 2 + 1 for n in range(80)]


@pytest.mark.parametrize("thread", ["busy", "cli:dm:vic"], ids=["shared-channel", "dm"])
async def test_concurrent_writers_of_one_thread_keep_seq_gap_free(
    migrated_database_url: str,
    memory_store: MemoryStore,
    embedding_server: LocalModelServer,
    thread: str,
) -> None:
    """Thirty pairs written at once by two writers, then one of them again (a batch rerun):
    seqs 1..60 once each; a shared channel's window holds its newest ``WINDOW_PAIRS``."""
    async with MemoryStore.open(
        settings_for(migrated_database_url), CachingEmbedder(server_embedder(embedding_server))
    ) as other:

        async def write(store: MemoryStore, number: int) -> None:
            pair = PairRows(thread, "vic", f"q{number}", f"a{number}", utc_now(), f"event-{number}")
            async with store.connection() as connection, connection.transaction():
                await write_pair(connection, pair, IDLE, WINDOW_PAIRS)

        await asyncio.gather(*(write(memory_store if n % 2 else other, n) for n in range(30)))
        again = PairRows(thread, "vic", "q0", "a0", utc_now(), "event-0")
        async with other.connection() as connection, connection.transaction():
            await write_pair(connection, again, IDLE, WINDOW_PAIRS)  # there: not appended again
    async with memory_store.connection() as connection:
        cursor = await connection.execute(
            "SELECT seq FROM conversation_turns WHERE thread_id = %s ORDER BY seq", (thread,)
        )
        seqs = [row["seq"] for row in await cursor.fetchall()]
        cursor = await connection.execute(
            "SELECT seq, content FROM channel_turns WHERE thread_id = %s ORDER BY seq", (thread,)
        )
        copies = await cursor.fetchall()
        window = await read_window(connection, thread, WINDOW_PAIRS, utc_now(), IDLE)
    assert seqs == list(range(1, 61))
    newest = list(range(61 - 2 * WINDOW_PAIRS, 61))
    assert [turn.seq for turn in window] == newest
    if thread == "busy":
        assert [row["seq"] for row in copies] == newest
        assert [row["content"] for row in copies] == [turn.content for turn in window]
    else:
        assert copies == []


async def test_an_idle_gap_starts_a_session_and_recall_brings_back_the_older_fact(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    clock = Clock()
    instance = Instance(memory_store, model, clock)
    await instance.handle(said("my sister lives in Porto and teaches piano"))
    await instance.handle(said("unrelated chat about the weather today"))
    clock.now += IDLE + timedelta(minutes=1)
    await instance.handle(said("where does my sister live and what does she teach, piano?"))
    contents = sent_contents(chat_server)
    assert "unrelated chat about the weather today" not in contents, (
        "the old session leaked into the window"
    )
    recalled = [c for c in contents if c.startswith("Earlier messages of this user")]
    assert recalled
    assert 'user: "my sister lives in Porto and teaches piano"' in recalled[0]
    async with memory_store.connection() as connection:
        cursor = await connection.execute(
            "SELECT DISTINCT session_id FROM conversation_turns"
            " WHERE thread_id = 'cli:room' ORDER BY 1"
        )
        assert [row["session_id"] for row in await cursor.fetchall()] == [1, 2]


async def test_short_turns_fill_the_recall_section_past_the_count_its_budget_is_sized_for(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    # A recall budget of 200 tokens, none for memories to leave it.
    instance = Instance(memory_store, model, Clock(), pairs=0, memory_budget=0)
    for number in range(12):
        await instance.handle(said(f"tea n{number}"))
    await instance.handle(said("tea?"))
    section = next(
        c for c in sent_contents(chat_server) if c.startswith("Earlier messages of this user")
    )
    lines = [line for line in section.splitlines() if line.startswith("user:")]
    assert len(lines) == 12  # every earlier message: about 5 tokens each
    assert len(lines) > recall_candidates(200)


async def test_recall_never_crosses_users(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    clock = Clock()
    instance = Instance(memory_store, model, clock, pairs=0)
    await instance.handle(said("my secret code word is pineapple", user="wes", thread="a"))
    await instance.handle(said("what is my secret code word, pineapple?", user="xia", thread="b"))
    assert not any("pineapple" in c and "wes" in c for c in sent_contents(chat_server))
    assert not any(c.startswith("Earlier messages") for c in sent_contents(chat_server))


async def test_notes_are_edited_by_the_tool_committed_once_and_injected_next_time(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    clock = Clock()
    instance = Instance(memory_store, model, clock)
    chat_server.script_tool_calls(
        [
            (
                "manage_long_term_memory",
                {"operation": "append", "content": "# Family\nHas a sister in Porto."},
            )
        ]
    )
    chat_server.script_tool_calls(
        [("manage_long_term_memory", {"operation": "append", "content": "# Work\nTeacher."})]
    )
    chat_server.script_tool_calls(
        [("manage_long_term_memory", {"operation": "append", "content": "x" * 400})]
    )
    chat_server.script_reply("noted")
    result = await instance.handle(said("please note these"))
    tool_results = [
        m["content"] for m in chat_server.chat_requests()[-1]["messages"] if m["role"] == "tool"
    ]
    assert tool_results[:2] == [
        "notes updated (31 of 300 characters)",
        "notes updated (48 of 300 characters)",
    ]
    assert tool_results[2].startswith("error: notes would be")
    assert result.outcome == "OK"
    await instance.handle(said("what do you know about me?"))
    notes = next(
        c for c in sent_contents(chat_server) if c.startswith("Your notes about this user")
    )
    assert notes.endswith(
        "\n~~~markdown\n# Family\nHas a sister in Porto.\n\n# Work\nTeacher.\n~~~"
    )
    async with memory_store.connection() as connection:
        cursor = await connection.execute("SELECT count(*) AS n FROM agent_notes")
        assert (await cursor.fetchone())["n"] == 1  # type: ignore[index]
