"""Reading a file of derived items: each item checked against the corpus, a bad line named."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from llm_bot_tools.evaluation.derived import DerivedItem, load_derived
from llm_bot_tools.evaluation.retrieval import CorpusTurn

AT = datetime(2026, 10, 1, 10, 0, tzinfo=UTC)
CORPUS = [
    CorpusTurn("t1", "kim", "chat:a", "user", "We booked the trip", AT),
    CorpusTurn("t2", "kim", "chat:a", "assistant", "Enjoy!", AT),
    CorpusTurn("t3", "lou", "chat:b", "user", "Hello", AT),
]
SUMMARY = {"kind": "summary", "user_id": "kim", "thread_id": "chat:a", "sources": ["t1", "t2"]}


def written(tmp_path: Path, *rows: Any) -> Path:
    path = tmp_path / "derived.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_summaries_and_facts_are_read_with_their_sources(tmp_path: Path) -> None:
    fact = {"kind": "fact", "user_id": "kim", "thread_id": "chat:a", "sources": ["t1"]}
    path = written(tmp_path, SUMMARY | {"text": "A trip"}, "", fact | {"text": "x", "key": "k"})
    assert load_derived(path, CORPUS) == [
        DerivedItem("summary", "kim", "chat:a", ("t1", "t2"), "A trip"),
        DerivedItem("fact", "kim", "chat:a", ("t1",), "x", "k"),
    ]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ("{not json", "not JSON"),
        ({"kind": "summary", "user_id": "kim"}, "missing thread_id, sources, text"),
        (SUMMARY | {"kind": "note", "text": "x"}, "kind must be summary or fact"),
        (SUMMARY | {"text": " "}, "text must be a non-empty string"),
        (SUMMARY | {"text": "x", "key": "k"}, "key is a fact's, a non-empty string"),
        (SUMMARY | {"text": "x", "sources": []}, "sources must be a non-empty list"),
        (SUMMARY | {"text": "x", "sources": ["t9"]}, "source t9 is no corpus turn"),
        (SUMMARY | {"text": "x", "sources": ["t3"]}, "source t3 is not a turn of kim in chat:a"),
    ],
)
def test_a_bad_line_is_named_with_what_is_wrong(tmp_path: Path, row: Any, error: str) -> None:
    path = written(tmp_path, SUMMARY | {"text": "fine"}, row)
    with pytest.raises(ValueError, match=f"^{path}:2: {error}"):
        load_derived(path, CORPUS)
