"""`llm-bot memories ...` against a real database, through the same store the worker uses."""

from __future__ import annotations

import json

import pytest

from llm_bot.cli import main
from llm_bot_tools.local.openai_server import LocalModelServer

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(
    migrated_database_url: str, embedding_server: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", migrated_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("MEMORY_EMBEDDING_ENDPOINT", embedding_server.base_url)
    monkeypatch.setenv("MEMORY_SIMILARITY_THRESHOLD", "0.1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(["memories", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("cli_env")
def test_put_list_search_get_delete(capsys: pytest.CaptureFixture[str]) -> None:
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


@pytest.mark.usefixtures("cli_env")
def test_bad_metadata_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memories", "put", "x", "--user", "u", "--metadata", '{"id": "1"}']) == 2
    assert capsys.readouterr().err.strip() == "llm-bot: error: metadata key 'id' is reserved"


def test_an_empty_user_is_refused_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main(["memories", "list", "--user", ""])
    assert exit_code.value.code == 2
    assert "must not be empty" in capsys.readouterr().err


@pytest.mark.usefixtures("cli_env")
def test_a_stored_text_reaches_the_terminal_as_one_line_without_its_controls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A memory's text is a user's or a model's: its escape sequences would be read by the
    operator's terminal as commands, its line breaks would print as memories of their own."""
    hostile = "likes \x1b]0;pwned\x07tea\nk2  a memory that is not there"
    key = run(capsys, "put", hostile, "--user", "quinn")["key"]  # type: ignore[index]
    run(capsys, "put", "likes \x1b[31mcoffee", "--user", "quinn", "--key", key)
    for argv in (["list"], ["get", key, "--history"]):
        assert main(["memories", *argv, "--user", "quinn"]) == 0
        out = capsys.readouterr().out
        assert not any(character in out for character in "\x1b\x07")
        assert len(out.strip().splitlines()) == (1 if argv == ["list"] else 2), out
        assert "\\u001b" in out
