"""Question categories inferred for queries that do not name one, and labelled ones kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_bot_tools.evaluation.categories import inferred_category
from llm_bot_tools.evaluation.retrieval import load_queries


@pytest.mark.parametrize(
    ("query", "evidence", "category"),
    [
        ("When did Sam move to Porto?", 1, "temporal"),
        ("How long has she been learning the cello?", 2, "temporal"),
        ("What year did they buy the boat?", 1, "temporal"),
        ("Would Kim enjoy a jazz festival?", 2, "open-domain"),
        ("What is she likely to study next?", 1, "open-domain"),
        ("Which cities did Ana visit?", 3, "multi-hop"),
        ("What is the name of Ana's cat?", 1, "single-hop"),
    ],
)
def test_rules(query: str, evidence: int, category: str) -> None:
    assert inferred_category(query, evidence) == category


def test_a_labelled_category_is_kept_and_a_missing_one_inferred(tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    rows = [
        {"id": "a", "user_id": "u", "query": "When did I call?", "relevant": ["t1"]},
        {"id": "b", "user_id": "u", "query": "x", "relevant": ["t1"], "category": "keyword"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    inferred, labelled = load_queries(path)
    assert (inferred.category, inferred.category_inferred) == ("temporal", True)
    assert (labelled.category, labelled.category_inferred) == ("keyword", False)
