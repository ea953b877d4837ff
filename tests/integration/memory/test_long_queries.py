"""A prompt of any size an event can carry, searched on the real database: memory search and
recall read its words from its beginning (``QUERY_MAX_CHARS``, what the embedder reads), so a
prompt of hundreds of kilobytes neither overflows Postgres's stack in ``to_tsquery`` nor costs
seconds of parsing (160 KB of distinct words: 2.3 s a recall over 2,000 turns whole, 0.2 s
cut), and the words at its start still find what they name."""

from __future__ import annotations

import pytest

from llm_bot.db.vectors import vector_param
from llm_bot.memory.recall import recall_turns
from llm_bot.memory.store import MemoryStore

from .conftest import Connection

pytestmark = pytest.mark.integration
# 450 KB of distinct words: whole, their tsquery fails with "stack depth limit exceeded".
FLOOD = " ".join(f"w{index}q" for index in range(60_000))
PROMPT = "did I mention my kayak? " + FLOOD


async def test_recall_reads_the_beginning_of_a_huge_prompt(connection: Connection) -> None:
    await connection.execute(
        "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index, role,"
        " content, created_at, source_event, embedding) VALUES"
        " ('lake', 1, 'ana', 1, 0, 'user', 'I bought a kayak', now(), 'e1', %s::vector),"
        " ('lake', 2, 'ana', 1, 1, 'assistant', 'Enjoy it', now(), 'e1', %s::vector)",
        (vector_param([0.0, 1.0, 0.0]), vector_param([0.0, 1.0, 0.0])),
    )
    turns = await recall_turns(
        connection,
        "ana",
        PROMPT,
        [1.0, 0.0, 0.0],
        exclude=set(),
        limit=5,
        threshold=-1.0,
        mode="lexical",
    )
    assert [turn.content for turn in turns][:1] == ["I bought a kayak"]


async def test_memory_search_reads_the_beginning_of_a_huge_prompt(
    memory_store: MemoryStore,
) -> None:
    await memory_store.for_user("ana").put("Ana paddles a kayak on Sundays")
    hits = await memory_store.for_user("ana").search(PROMPT, limit=5, threshold=0.99)
    assert [(hit.content, hit.keyword_match) for hit in hits] == [
        ("Ana paddles a kayak on Sundays", True)
    ]
