"""`llm-bot reembed` against a real database: memories and history move to the new model together,
an interrupted run resumes, and the old model is refused afterwards with the command to run."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.memory.commit import MemoryCommit, Pair
from llm_bot.memory.store import MemoryStore
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_server import LocalModelServer

from ...from_settings import settings_for
from ..conftest import server_embedder

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(
    migrated_database_url: str, embedding_server: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", migrated_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("MEMORY_EMBEDDING_ENDPOINT", embedding_server.base_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "local-embeddings")  # server_embedder's
    monkeypatch.setenv("MEMORY_SIMILARITY_THRESHOLD", "0.1")


async def remember(url: str, server: LocalModelServer) -> None:
    """A memory and a history pair, with the server's 384-dimension model."""
    embedder = server_embedder(server)
    async with MemoryStore.open(settings_for(url), embedder) as store:
        await store.for_user("rae").put("Rae speaks Welsh")
        pair = Pair(
            "event-1", "chat:room", "rae", "I grew up in Cardiff", "noted", datetime.now(UTC), None
        )
        await MemoryCommit.from_settings(store, load_settings()).commit_now(pair)
    await embedder.close()


def vector_sizes(url: str) -> tuple[object, ...]:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT (SELECT array_agg(DISTINCT vector_dims(embedding)) FROM conversation_turns),"
            " (SELECT array_agg(DISTINCT vector_dims(embedding)) FROM memories),"
            " (SELECT count(*) FROM memories WHERE embedding IS NOT NULL),"
            " (SELECT count(*) FROM memories WHERE embedding_next IS NOT NULL)"
        ).fetchone()
    assert row is not None
    return tuple(row)


def history_indexes(url: str) -> list[tuple[str, bool]]:
    """(name, valid) of each HNSW index on history vectors (llm_bot/db/turn_index.py)."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am a ON a.oid = c.relam"
            " WHERE i.indrelid = 'conversation_turns'::regclass AND a.amname = 'hnsw'"
            " ORDER BY c.relname"
        ).fetchall()
    return [(name, valid) for name, valid in rows]


@pytest.mark.usefixtures("cli_env")
def test_reembed_moves_memories_and_history_and_resumes(
    migrated_database_url: str,
    embedding_server: LocalModelServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asyncio.run(remember(migrated_database_url, embedding_server))
    assert vector_sizes(migrated_database_url) == ([384], [384], 1, 0)
    assert history_indexes(migrated_database_url) == [
        ("conversation_turns_embedding_384_hnsw", True)
    ]
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "embedder-b")
    monkeypatch.setenv("MEMORY_EMBEDDING_DIMENSIONS", "32")

    assert main(["memories", "list", "--user", "rae"]) == 2
    refused = capsys.readouterr().err.strip().splitlines()
    assert len(refused) == 1
    assert "(384 dimensions)" in refused[0]
    assert "`llm-bot reembed`" in refused[0]

    embedding_server.fail_next(100, status=500, kind="embeddings")  # beyond any retry
    assert main(["reembed", "--batch", "1"]) == 1
    assert "run again to resume" in capsys.readouterr().err
    embedding_server.reset()

    assert main(["reembed", "--batch", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "reembed: resuming the move" in captured.err
    report = json.loads(captured.out)
    assert report["switched"] is True
    assert report["vectors"] == 3  # the memory and both messages of the pair
    assert vector_sizes(migrated_database_url) == ([32], [32], 1, 0)
    assert history_indexes(migrated_database_url) == [
        ("conversation_turns_embedding_32_hnsw", True)
    ]

    assert main(["memories", "search", "does rae speak welsh", "--user", "rae", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [m["content"] for m in found] == ["Rae speaks Welsh"]

    with psycopg.connect(migrated_database_url, autocommit=True) as connection:
        connection.execute("DROP INDEX conversation_turns_embedding_32_hnsw")
    assert main(["reembed", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["switched"], again["vectors"]) == (False, 0)
    assert history_indexes(migrated_database_url) == [
        ("conversation_turns_embedding_32_hnsw", True)
    ]


@pytest.mark.usefixtures("cli_env")
def test_a_bad_batch_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["reembed", "--batch", "0"])
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
