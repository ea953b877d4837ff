"""Reading an evaluation set's corpus and queries: a line the measure cannot use is named with
what is wrong before any work, and text no stored turn can hold is stored as the worker would."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from llm_bot.cli import main
from llm_bot_tools.evaluation.calibration import load_pairs
from llm_bot_tools.evaluation.derived import load_derived
from llm_bot_tools.evaluation.retrieval import load_corpus, load_queries

TURN = {
    "id": "t1",
    "user_id": "kim",
    "thread_id": "chat:a",
    "role": "user",
    "text": "We booked the trip",
    "at": "2026-10-01T10:00:00+00:00",
}
QUERY = {"id": "q1", "user_id": "kim", "query": "What did we book?", "relevant": ["t1"]}


def written(tmp_path: Path, *rows: Any, prefix: str = "", end: str = "\n") -> Path:
    path = tmp_path / "set.jsonl"
    lines = ((r if isinstance(r, str) else json.dumps(r)) + end for r in rows)
    path.write_text(prefix + "".join(lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ("[1, 2]", "not a JSON object"),
        (TURN | {"id": "t2", "at": "2026-10-01 10:00"}, "turn t2: at must be an ISO 8601 time"),
        (TURN | {"id": "t2", "at": "yesterday"}, "turn t2: at must be an ISO 8601 time"),
        (TURN | {"id": "t2", "role": "system"}, "turn t2: role must be user or assistant"),
        (TURN | {"id": "t2", "text": None}, "text must be a string"),
        ({"id": "t2"}, "missing user_id, thread_id, role, text, at"),
    ],
)
def test_a_bad_corpus_line_is_named_with_what_is_wrong(
    tmp_path: Path, row: Any, error: str
) -> None:
    path = written(tmp_path, TURN, row)
    with pytest.raises(ValueError, match=f"^{path}:2: {error}"):
        load_corpus(path)


def test_a_turn_id_given_twice_is_refused(tmp_path: Path) -> None:
    path = written(tmp_path, TURN, TURN | {"role": "assistant"})
    with pytest.raises(ValueError, match="turn id t1 appears twice"):
        load_corpus(path)


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (QUERY | {"id": "q2", "relevant": []}, "query q2: relevant must be a non-empty list"),
        (QUERY | {"id": "q2", "relevant": "t1"}, "query q2: relevant must be a non-empty list"),
        (QUERY | {"id": "q2", "query": 7}, "query must be a string"),
        ('"just a string"', "not a JSON object"),
    ],
)
def test_a_bad_query_line_is_named_with_what_is_wrong(tmp_path: Path, row: Any, error: str) -> None:
    path = written(tmp_path, QUERY, row)
    with pytest.raises(ValueError, match=f"^{path}:2: {error}"):
        load_queries(path)


def test_a_byte_order_mark_and_crlf_line_ends_are_read_as_none(tmp_path: Path) -> None:
    corpus = load_corpus(written(tmp_path, TURN, prefix="\ufeff", end="\r\n"))
    assert [(t.id, t.text, t.at) for t in corpus] == [
        ("t1", "We booked the trip", datetime(2026, 10, 1, 10, tzinfo=UTC))
    ]
    queries = load_queries(written(tmp_path, QUERY, prefix="\ufeff", end="\r\n"))
    assert [(q.id, q.relevant) for q in queries] == [("q1", frozenset({"t1"}))]


def test_text_no_stored_turn_can_hold_is_read_as_the_worker_stores_it(tmp_path: Path) -> None:
    """A lone surrogate or a NUL has no place in Postgres text: the run failed on it after its
    set-up, where the worker would have stored U+FFFD in its place."""
    corpus = load_corpus(written(tmp_path, TURN | {"text": "a \ud800 b \x00 c"}))
    assert corpus[0].text == "a \ufffd b \ufffd c"
    query = load_queries(written(tmp_path, QUERY | {"query": "what \udfff?"}))[0]
    assert query.query == "what \ufffd?"
    summary = {"kind": "summary", "user_id": "kim", "thread_id": "chat:a", "sources": ["t1"]}
    items = load_derived(written(tmp_path, summary | {"text": "trip \ud800"}), corpus)
    assert items[0].text == "trip \ufffd"


PAIR = {"memory": "The user is vegetarian.", "query": "Suggest a dinner", "relevant": True}


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (PAIR | {"relevant": "false"}, "relevant must be true or false"),
        (PAIR | {"relevant": 0}, "relevant must be true or false"),
        (PAIR | {"memory": None}, "memory must be a non-empty string"),
        (PAIR | {"query": ["x"]}, "query must be a non-empty string"),
        (PAIR | {"memory": " "}, "memory must be a non-empty string"),
        ("[1]", "not a JSON object"),
    ],
)
def test_a_bad_labelled_pair_is_named_with_what_is_wrong(
    tmp_path: Path, row: Any, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = written(tmp_path, PAIR, PAIR | {"relevant": False}, row)
    with pytest.raises(ValueError, match=f"^{path}:3: not a labelled pair \\({error}\\)"):
        load_pairs(path)
    assert main(["eval", "calibrate", "--pairs", str(path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{path}:3" in line


def test_labelled_pairs_are_read_as_labelled(tmp_path: Path) -> None:
    pairs = load_pairs(written(tmp_path, PAIR, PAIR | {"relevant": False}))
    assert [p.relevant for p in pairs] == [True, False]


@pytest.mark.parametrize("part", ["--corpus", "--queries", "--derived"])
def test_a_set_file_without_a_line_is_refused_before_any_work(
    part: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty query file failed the command after the corpus was loaded (a mean of no
    queries); an empty derived file measured everything a second time for nothing. (The
    database is one nothing listens on: no work may begin.)"""
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1:1/none")
    files = {name: tmp_path / name.strip("-") for name in ("--corpus", "--queries")}
    files["--corpus"].write_text(
        json.dumps(TURN) + "\n" + json.dumps(TURN | {"id": "t2", "role": "assistant"}) + "\n"
    )
    files["--queries"].write_text(json.dumps(QUERY) + "\n")
    files[part] = tmp_path / "empty.jsonl"
    files[part].write_text("\n", encoding="utf-8")
    argv = [arg for name, path in files.items() for arg in (name, str(path))]
    assert main(["eval", "retrieval", *argv]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"{files[part]}: no JSON lines")
