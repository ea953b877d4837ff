"""Migration 0013 on a database in the form llm-bot kept before it: memories in LangGraph's
tables, with and without vectors, with and without ``learnedIn``, earlier versions, user ids
holding ``.`` and ``%``, and a re-embedding under way. Afterwards every memory, vector,
visibility and version is in ``memories``/``memory_versions``, found by search in both modes,
LangGraph's tables are gone, and the re-embedding goes on from the vectors it had made."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import openai
import psycopg
import pytest
from psycopg.rows import dict_row

from llm_bot.db.migrate import migrate
from llm_bot.db.vectors import register_vectors, vector_param
from llm_bot.lifecycle.reembed import reembed
from llm_bot.llm.embeddings import OpenAIEmbedder
from llm_bot.memory.store import MemoryStore
from llm_bot_tools.local.openai_server import LocalModelServer

from ...from_settings import settings_for
from ..conftest import server_embedder
from .todays_form import create_langgraph_store, migrate_through, namespace

pytestmark = pytest.mark.integration

LIVE, NEXT = 384, 64
WRITTEN = datetime(2026, 1, 1, tzinfo=UTC)
UPDATED = datetime(2026, 2, 1, tzinfo=UTC)
BEFORE_UPDATE = datetime(2026, 1, 15, tzinfo=UTC)


@dataclass(frozen=True)
class Old:
    """A memory as the worker stored it, and the one word that finds it."""

    user: str
    key: str
    value: dict[str, Any]
    word: str
    vector: bool = True  # a row in store_vectors
    shadow: datetime | None = None  # a row in store_vectors_next, made at this time
    visibility: str = "dm"  # what it must become

    @property
    def content(self) -> str:
        return str(self.value["content"])


OLD = [
    Old(
        "ana",
        "k1",
        {"content": "Ana plays the theremin", "metadata": {"topic": "a"}, "learnedIn": "public"},
        "theremin",
        shadow=UPDATED,
        visibility="public",
    ),
    Old("ana", "k2", {"content": "Ana keeps axolotls", "learnedIn": "dm"}, "axolotls", False),
    Old("a.b", "k1", {"content": "Dot collects barometers", "metadata": {}}, "barometers"),
    Old(
        "a%2Eb",
        "k1",
        {"content": "Escaped sails catamarans", "metadata": None, "learnedIn": "public"},
        "catamarans",
        shadow=BEFORE_UPDATE,  # made before the memory was rewritten: stale
        visibility="public",
    ),
    Old("50%.off", "k1", {"content": "Mixed bakes sourdough", "learnedIn": "??"}, "sourdough"),
]
# (user, key, version, content, learned_in) of earlier texts.
VERSIONS = [
    ("a.b", "k1", 1, "Dot collects thermometers", "dm"),
    ("50%.off", "k1", 1, "Mixed bakes rye", "public"),
    ("50%.off", "k1", 2, "Mixed bakes spelt", "dm"),
]


def fill(url: str, live: dict[str, list[float]], shadow: dict[str, list[float]]) -> None:
    """Today's form: our migrations through 0012, LangGraph's tables, the old rows."""
    migrate_through(url, 12)
    create_langgraph_store(url, LIVE, NEXT)
    with psycopg.connect(url, autocommit=True) as db:
        register_vectors(db)
        db.execute(
            "INSERT INTO embedding_space (model, dimensions, next_model, next_dimensions)"
            " VALUES ('local-embeddings', %s, 'next-embeddings', %s)",
            (LIVE, NEXT),
        )
        for old in OLD:
            prefix = namespace(old.user)
            db.execute(
                "INSERT INTO store (prefix, key, value, created_at, updated_at)"
                " VALUES (%s, %s, %s, %s, %s)",
                (prefix, old.key, json.dumps(old.value), WRITTEN, UPDATED),
            )
            if old.vector:
                db.execute(
                    "INSERT INTO store_vectors (prefix, key, field_name, embedding, updated_at)"
                    " VALUES (%s, %s, 'content', %s::vector, %s)",
                    (prefix, old.key, vector_param(live[old.content]), UPDATED),
                )
            if old.shadow is not None:
                db.execute(
                    "INSERT INTO store_vectors_next (prefix, key, field_name, embedding,"
                    " updated_at) VALUES (%s, %s, 'content', %s::vector, %s)",
                    (prefix, old.key, vector_param(shadow[old.content]), old.shadow),
                )
        for user, key, version, content, learned_in in VERSIONS:
            db.execute(
                "INSERT INTO memory_versions (prefix, key, version, content, learned_in,"
                " valid_from, valid_to) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (namespace(user), key, version, content, learned_in, WRITTEN, UPDATED),
            )
        db.execute(
            "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
            " role, content, created_at, source_event, learned_in)"
            " VALUES ('chat:dm:ana', 1, 'ana', 1, 1, 'user', 'hi', now(), 'e1', 'dm')"
        )
        db.execute(
            "INSERT INTO agent_notes (user_id, agent_name, content, learned_in)"
            " VALUES ('ana', 'llm-bot', 'notes', 'public')"
        )


def floats(text: str | None) -> list[float] | None:
    return None if text is None else [float(x) for x in text.strip("[]").split(",")]


def close(a: list[float] | None, b: list[float]) -> bool:
    return (
        a is not None
        and len(a) == len(b)
        and all(abs(x - y) < 1e-6 for x, y in zip(a, b, strict=True))
    )


def moved(url: str) -> dict[tuple[str, str], dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as db:
        rows = db.execute(
            "SELECT user_id, key, content, metadata, visibility, created_at, updated_at,"
            " embedding::text AS embedding, embedding_next::text AS embedding_next FROM memories"
        ).fetchall()
    return {(row["user_id"], row["key"]): row for row in rows}


async def test_every_memory_vector_visibility_and_version_moves_and_is_found(
    fresh_database_url: str, embedding_server: LocalModelServer
) -> None:
    embedder = server_embedder(embedding_server)
    texts = [old.content for old in OLD]
    live = dict(zip(texts, await embedder.embed(texts), strict=True))
    shadow = {old.content: [0.01 * (i + 1)] * NEXT for i, old in enumerate(OLD)}
    fill(fresh_database_url, live, shadow)

    assert migrate(fresh_database_url)[0] == "0013_memories.sql"  # and any later ones

    rows = moved(fresh_database_url)
    assert set(rows) == {(old.user, old.key) for old in OLD}
    for old in OLD:
        row = rows[old.user, old.key]
        assert (row["content"], row["visibility"]) == (old.content, old.visibility), old
        assert row["metadata"] == (old.value.get("metadata") or {})
        assert (row["created_at"], row["updated_at"]) == (WRITTEN, UPDATED)
        embedding, embedding_next = floats(row["embedding"]), floats(row["embedding_next"])
        assert close(embedding, live[old.content]) if old.vector else embedding is None, old
        fresh = old.shadow is not None and old.shadow >= UPDATED
        assert close(embedding_next, shadow[old.content]) if fresh else embedding_next is None

    with psycopg.connect(fresh_database_url) as db:
        versions = db.execute(
            "SELECT user_id, key, version, content, visibility FROM memory_versions"
            " ORDER BY user_id, version"
        ).fetchall()
        gone = db.execute(
            "SELECT to_regclass(t) FROM unnest(ARRAY['store', 'store_vectors',"
            " 'store_vectors_next', 'store_migrations', 'vector_migrations']) AS t"
        ).fetchall()
        turn = db.execute("SELECT visibility FROM conversation_turns").fetchone()
        notes = db.execute("SELECT visibility FROM agent_notes").fetchone()
    assert versions == sorted(VERSIONS, key=lambda v: (v[0], v[2]))
    assert gone == [(None,)] * 5
    assert (turn, notes) == (("dm",), ("public",))

    async with MemoryStore.open(settings_for(fresh_database_url), embedder) as store:
        for old in OLD:
            memories = store.for_user(old.user)
            lexical = await memories.search(old.word, limit=5, threshold=-1.0, mode="lexical")
            assert [hit.key for hit in lexical] == [old.key], old
            public = await memories.search(
                old.word, limit=5, threshold=-1.0, mode="lexical", include_private=False
            )
            assert [hit.key for hit in public] == ([old.key] if old.visibility == "public" else [])
            dense = await memories.search(old.content, limit=1, threshold=-1.0, mode="dense")
            if old.vector:
                assert [hit.key for hit in dense] == [old.key]
                assert dense[0].similarity > 0.99
            else:
                assert old.key not in [hit.key for hit in dense]
        for user in {old.user for old in OLD}:
            listed = {memory.key for memory in await store.for_user(user).list_memories()}
            assert listed == {old.key for old in OLD if old.user == user}
        history = await store.for_user("50%.off").history("k1")
        assert [(v.content, v.visibility) for v in history] == [
            ("Mixed bakes rye", "public"),
            ("Mixed bakes spelt", "dm"),
        ]
    await embedder.close()

    # The re-embedding under way goes on from the vectors it had made: only the rest is
    # embedded (the memories without a fresh next vector, and the turn), and the one it had
    # is the live vector after the switch.
    client = openai.AsyncOpenAI(base_url=embedding_server.base_url, api_key="k", max_retries=0)
    lines: list[str] = []
    async with await psycopg.AsyncConnection.connect(
        fresh_database_url, autocommit=True
    ) as connection:
        report = await reembed(
            connection,
            OpenAIEmbedder(client, "next-embeddings", NEXT),
            batch=10,
            progress=lines.append,
        )
    await client.close()
    assert any(line.startswith("resuming the move") for line in lines)
    assert (report.switched, report.vectors) == (True, len(OLD) - 1 + 1)
    theremin = moved(fresh_database_url)["ana", "k1"]
    assert close(floats(theremin["embedding"]), shadow["Ana plays the theremin"])
