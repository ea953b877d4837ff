"""`llm-bot personalities ...` against a real database: BitBrat's own personality file in,
listed, shown and deleted; bad documents are one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_bot.cli import main

pytestmark = pytest.mark.integration

LURK = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat" / "personalities"
LURK_FILE = LURK / "lurk_personality.json"


@pytest.fixture
def cli_env(migrated_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", migrated_database_url)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(["personalities", *argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("cli_env")
def test_import_list_get_delete_the_lurk_personality(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(LURK_FILE.read_text())
    (imported,) = run(capsys, "import", str(LURK_FILE))  # type: ignore[misc]
    assert imported["name"] == "lurk-master", "BitBrat's own file, hyphen and all"
    assert (imported["version"], imported["status"]) == (1, "active")
    assert imported["text"] == document["text"]
    assert imported["tags"] == ["tutorial", "lurk"]
    assert imported["createdAt"].startswith("2026-06-22T17:09:00")
    listed = run(capsys, "list")
    assert [(p["name"], p["version"]) for p in listed] == [("lurk-master", 1)]  # type: ignore[union-attr]
    assert run(capsys, "get", "lurk-master")["text"] == document["text"]  # type: ignore[index]
    run(capsys, "import", str(LURK_FILE))  # importing again replaces version 1
    assert len(run(capsys, "list")) == 1  # type: ignore[arg-type]
    assert run(capsys, "delete", "lurk-master") == {
        "name": "lurk-master",
        "version": None,
        "deleted": 1,
    }
    assert run(capsys, "list") == []
    assert main(["personalities", "get", "lurk-master"]) == 2
    assert "no personality 'lurk-master'" in capsys.readouterr().err


@pytest.mark.usefixtures("cli_env")
def test_put_numbers_versions_and_get_shows_the_highest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first = run(capsys, "put", "bratty", "--text", "You are Bratty.")
    second = run(capsys, "put", "bratty", "--text", "You are Bratty v2.", "--model", "m2")
    assert (first["version"], second["version"]) == (1, 2)  # type: ignore[index]
    assert run(capsys, "get", "bratty")["model"] == "m2"  # type: ignore[index]
    assert run(capsys, "get", "bratty", "--version", "1")["text"] == "You are Bratty."  # type: ignore[index]
    several = tmp_path / "several.json"
    several.write_text(
        json.dumps(
            [
                {"name": "a", "text": "A", "status": "active", "version": 3},
                {"name": "b", "text": "B", "status": "inactive"},
            ]
        )
    )
    assert [p["name"] for p in run(capsys, "import", str(several))] == ["a", "b"]  # type: ignore[union-attr]
    assert run(capsys, "delete", "bratty", "--version", "1")["deleted"] == 1  # type: ignore[index]
    assert [p["version"] for p in run(capsys, "list", "--name", "bratty")] == [2]  # type: ignore[union-attr]


@pytest.mark.usefixtures("cli_env")
@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"name": "x", "status": "active"}, "personality 'x': missing required text"),
        ({"name": "x", "text": "t", "status": "live"}, "status must be one of"),
        ({"name": "x", "text": "t", "status": "active", "version": 0}, "version must be >= 1"),
        ({"name": "x", "text": " ", "status": "active"}, "text must not be empty"),
        (
            {"name": "x", "text": "t", "status": "active", "version": 2**31},
            "version must be <= 2147483647",
        ),
        ({"name": "x", "text": "a\u0000b", "status": "active"}, "text holds NUL"),
        ({"name": "x", "text": "t", "status": "active", "author": "\ud800"}, "author holds a"),
        (
            {"name": "x", "text": "t", "status": "active", "tags": ["a\u0000", "b"]},
            "tags holds NUL",
        ),
        ("just text", "a personality document is a JSON object"),
        ({"name": "good", "text": "other", "status": "active"}, "'good' version 1 is given twice"),
    ],
)
def test_a_bad_document_is_one_line_and_nothing_is_stored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, document: object, message: str
) -> None:
    path = tmp_path / "bad.json"
    good = {"name": "good", "text": "fine", "status": "active"}
    path.write_text(json.dumps([good, document]))
    assert main(["personalities", "import", str(path)]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert error.count("\n") == 1
    assert run(capsys, "list") == [], "the good document was not stored either"


def test_without_database_url_it_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["personalities", "list"]) == 2
    assert "DATABASE_URL is not set" in capsys.readouterr().err
