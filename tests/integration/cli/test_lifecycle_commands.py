"""`llm-bot forget-user | forget-thread | export-user | maintain` as an operator runs them:
receipts per table, the export in a file, the retention report, one-line errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import psycopg
import pytest

from llm_bot.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def database(migrated_database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DATABASE_URL", migrated_database_url)
    with psycopg.connect(migrated_database_url) as db:
        for seq, (thread, user, age) in enumerate(
            [
                ("cli:room", "quinn", "1 day"),
                ("cli:room", "rosa", "2 years"),
                ("cli:dm:quinn", "quinn", "1 day"),
            ]
        ):
            db.execute(
                "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
                " role, content, created_at, source_event)"
                " VALUES (%s, %s, %s, 1, 1, 'user', %s, now() - %s::interval, %s)",
                (thread, seq, user, f"{user} says hi", age, f"e{seq}"),
            )
        db.execute(
            "INSERT INTO conversation_threads (tenant, thread_id) VALUES ('quinn', 'cli:dm:quinn')"
        )
        db.execute(
            "INSERT INTO agent_notes (user_id, agent_name, content) VALUES ('quinn', 'b', 'n')"
        )
    return migrated_database_url


@pytest.mark.usefixtures("database")
def test_forget_user_prints_a_receipt_per_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forget-user", "quinn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "user quinn: deleted"
    counts = dict(line.split() for line in lines[1:])
    assert counts == {
        "memory_versions": "0",
        "memories": "0",
        "conversation_turns": "2",
        "channel_turns": "0",
        "conversation_threads": "1",
        "agent_notes": "1",
        "processed_events": "0",
        "tool_calls": "0",
        "answer_explanations": "0",
        "console_views": "0",
    }


@pytest.mark.usefixtures("database")
def test_forget_thread_removes_every_speaker_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["forget-thread", "cli:room", "--json"]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["deleted"]["conversation_turns"] == 2
    assert receipt["subject"] == "thread cli:room"


@pytest.mark.usefixtures("database")
def test_export_user_writes_one_json_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "quinn.json"
    assert main(["export-user", "quinn", "--output", str(target)]) == 0
    document = json.loads(target.read_text(encoding="utf-8"))
    assert document["format"] == "llm-bot.user-export.v1"
    assert sorted(turn["content"] for turn in document["tables"]["conversation_turns"]) == [
        "quinn says hi",
        "quinn says hi",
    ]
    assert "rosa" not in target.read_text(encoding="utf-8")
    assert "exported user quinn: " in capsys.readouterr().err


@pytest.mark.usefixtures("database")
@pytest.mark.parametrize("already_there", [False, True])
def test_an_export_file_is_readable_by_its_owner_alone(tmp_path: Path, already_there: bool) -> None:
    """Under the usual umask (022) a new file is readable by every account of the machine."""
    target = tmp_path / "quinn.json"
    if already_there:
        target.write_text("old")
        target.chmod(0o644)
    previous = os.umask(0o022)
    try:
        assert main(["export-user", "quinn", "--output", str(target)]) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text(encoding="utf-8"))["format"] == "llm-bot.user-export.v1"


def test_maintain_reports_what_each_rule_deleted(
    database: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RETENTION_HISTORY_DAYS", "30")
    assert main(["maintain", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["deleted"]["turns_expired"] == 1  # rosa's turn of two years ago
    assert "maintain: turns_expired: 1 deleted" in captured.err
    with psycopg.connect(database) as db:
        assert [r[0] for r in db.execute("SELECT user_id FROM conversation_turns")] == [
            "quinn",
            "quinn",
        ]


@pytest.mark.parametrize(
    "argv", [["maintain"], ["forget-user", "u"], ["forget-thread", "t"], ["export-user", "u"]]
)
def test_without_a_database_one_line_and_exit_2(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("llm-bot: error: DATABASE_URL is not set")
    assert len(error.strip().splitlines()) == 1


# An argument's bytes that are not UTF-8 reach Python as lone surrogates (os.fsdecode).
@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["forget-user", ""], "must not be empty"),
        (["forget-thread", ""], "must not be empty"),
        (["export-user", ""], "must not be empty"),
        (["forget-user", "a\udcffb"], "not valid UTF-8"),
        (["forget-thread", "cli:\udce9"], "not valid UTF-8"),
        (["export-user", "a\udcffb"], "not valid UTF-8"),
        (["memories", "delete", "--user", "a\udcffb", "k"], "not valid UTF-8"),
    ],
)
def test_an_id_that_is_empty_or_not_utf_8_is_refused_in_one_line(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main(argv)
    assert exit_code.value.code == 2
    error = capsys.readouterr().err
    assert problem in error
    assert len(error.strip().splitlines()) == 1
