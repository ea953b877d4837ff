"""`llm-bot eval retrieval` on the shipped dev set, with the real local embedding model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_bot.cli import main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def test_all_three_modes_run_and_hybrid_beats_dense(
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")
    plot = tmp_path / "eval.png"
    argv = ["eval", "retrieval", "--k", "4", "--json", "--plot", str(plot)]
    argv += [
        "--corpus",
        str(ROOT / "eval/corpus.jsonl"),
        "--queries",
        str(ROOT / "eval/queries.jsonl"),
    ]
    assert main(argv) == 0
    reports = {r["mode"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(reports) == {"dense", "lexical", "hybrid"}
    for report in reports.values():
        assert 0 <= report["recall_at_k"] <= 1
        assert 0 <= report["mrr"] <= 1
        assert report["queries"] == 20
    hybrid, dense = reports["hybrid"], reports["dense"]
    assert (hybrid["recall_at_k"], hybrid["mrr"]) >= (dense["recall_at_k"], dense["mrr"])
    assert hybrid["recall_at_k"] + hybrid["mrr"] > dense["recall_at_k"] + dense["mrr"]
    assert plot.stat().st_size > 10_000


def test_a_broken_corpus_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "t1", "user_id": "u"}\n')
    assert main(["eval", "retrieval", "--corpus", str(corpus)]) == 2
    error = capsys.readouterr().err.strip()
    expected = f"cannot read the evaluation set: {corpus}:1: missing thread_id, role, text, at"
    assert error == f"llm-bot: error: {expected}"
