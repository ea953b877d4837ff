"""`llm-bot memories ...` against a real database, through the same store the worker uses."""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.db.migrate import migrate
from llm_bot.local.openai_server import LocalModelServer

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(
    fresh_database_url: str, embedding_server: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate(fresh_database_url)
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("MEMORY_EMBEDDING_ENDPOINT", embedding_server.base_url)
    monkeypatch.setenv("MEMORY_SIMILARITY_THRESHOLD", "0.1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(["memories", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("cli_env")
def test_put_list_search_get_delete_forget(capsys: pytest.CaptureFixture[str]) -> None:
    put = run(
        capsys,
        "put",
        "Quinn plays the cello",
        "--user",
        "quinn",
        "--metadata",
        '{"topic": "music"}',
    )
    assert isinstance(put, dict)
    assert put["outcome"] == "created"
    key = put["key"]
    listed = run(capsys, "list", "--user", "quinn")
    assert [m["content"] for m in listed] == ["Quinn plays the cello"]  # type: ignore[union-attr]
    found = run(capsys, "search", "which instrument does quinn play, the cello?", "--user", "quinn")
    assert [m["key"] for m in found] == [key]  # type: ignore[union-attr]
    assert run(capsys, "get", key, "--user", "quinn")["metadata"] == {"topic": "music"}  # type: ignore[index]
    assert run(capsys, "list", "--user", "someone-else") == []
    assert run(capsys, "delete", key, "--user", "quinn") == {"key": key, "deleted": True}
    run(capsys, "put", "Quinn has two cats", "--user", "quinn")
    with psycopg.connect(os.environ["DATABASE_URL"]) as connection:
        connection.execute(
            "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
            " role, content, created_at, source_event)"
            " VALUES ('t', 1, 'quinn', 1, 1, 'user', 'hi', now(), 'e')"
        )
        connection.execute(
            "INSERT INTO agent_notes (user_id, agent_name, content)"
            " VALUES ('quinn', 'llm-bot', 'n')"
        )
    assert run(capsys, "forget-user", "quinn") == {
        "user": "quinn",
        "memoriesDeleted": 1,
        "messagesDeleted": 1,
        "notesDeleted": 1,
    }


@pytest.mark.usefixtures("cli_env")
def test_bad_metadata_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memories", "put", "x", "--user", "u", "--metadata", '{"id": "1"}']) == 2
    assert capsys.readouterr().err.strip() == "llm-bot: error: metadata key 'id' is reserved"
