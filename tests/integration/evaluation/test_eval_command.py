"""`llm-bot eval retrieval` on the shipped dev set, with the real local embedding model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.db.migrate import migrate
from llm_bot.memory.wiring import open_memory_store
from llm_bot.settings import Settings
from llm_bot_tools.evaluation.retrieval import load_corpus, load_through_commit

from ...from_settings import settings_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def test_all_three_modes_run_per_category_and_hybrid_beats_each_side_where_it_is_weak(
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")
    # The corpus has no memories: the recall section may take their whole budget beside its own.
    monkeypatch.setenv("MEMORY_INJECTION_BUDGET", "20")
    plot = tmp_path / "eval.png"
    argv = ["eval", "retrieval", "--k", "4", "--json", "--plot", str(plot)]
    argv += ["--recall-budgets", "60,400"]
    argv += [
        "--corpus",
        str(ROOT / "eval/corpus.jsonl"),
        "--queries",
        str(ROOT / "eval/queries.jsonl"),
    ]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    reports = {r["mode"]: r for r in result["modes"]}
    assert set(reports) == {"dense", "lexical", "hybrid"}
    queries = (ROOT / "eval/queries.jsonl").read_text().splitlines()
    for report in reports.values():
        assert 0 <= report["recall_at_k"] <= 1
        assert 0 <= report["mrr"] <= 1
        assert report["queries"] == len(queries)
        categories = report["by_category"]
        assert set(categories) == {"keyword", "paraphrase", "temporal", "corrected-fact"}
        assert sum(c["queries"] for c in categories.values()) == len(queries)
        assert not any(c["inferred"] for c in categories.values())  # all labelled
        # Deeper, recall holds at least what the first k hold, in every category.
        deeper = [report["recall_at_depth"][depth] for depth in ("20", "40")]
        assert report["recall_at_k"] <= deeper[0]["recall"] <= deeper[1]["recall"]
        assert set(deeper[1]["by_category"]) == set(categories)
    hybrid, dense, lexical = reports["hybrid"], reports["dense"], reports["lexical"]
    # Words the embedding blurs (ticket numbers, names): hybrid finds what dense misses.
    keyword, dense_keyword = hybrid["by_category"]["keyword"], dense["by_category"]["keyword"]
    assert (
        keyword["recall_at_k"] + keyword["mrr"]
        > dense_keyword["recall_at_k"] + dense_keyword["mrr"]
    )
    # Paraphrases: hybrid finds what the words alone miss.
    assert hybrid["recall_at_k"] + hybrid["mrr"] > lexical["recall_at_k"] + lexical["mrr"]
    assert plot.stat().st_size > 10_000
    given = result["context"]
    assert given["recall_budget_tokens"] == 1000  # the worker's defaults
    assert given["context_pairs"] == 15
    assert given["overall"]["queries"] == len(queries)
    for score in [given["overall"], *given["by_category"].values()]:
        assert 0 <= score["in_recall"] <= score["evidence_in_context"] <= 1
        assert score["in_window"] <= score["evidence_in_context"]
    assert set(given["by_category"]) == set(hybrid["by_category"])
    users = {json.loads(line)["user_id"] for line in queries}
    assert set(given["by_conversation"]) == set(hybrid["by_conversation"]) == users
    spread = given["conversation_spread"]
    values = [c["evidence_in_context"] for c in given["by_conversation"].values()]
    assert (spread["min"], spread["max"]) == (min(values), max(values))
    assert 0 < given["recall_tokens_p50"] <= given["recall_tokens_p95"]
    small, large = result["budgets"]
    assert (small["recall_budget_tokens"], large["recall_budget_tokens"]) == (60, 400)
    assert small["recall_tokens_p95"] <= 60 + 20 < large["recall_tokens_p95"] <= 400 + 20
    assert small["overall"]["in_recall"] < large["overall"]["in_recall"]
    assert (tmp_path / "eval-budgets.png").stat().st_size > 10_000


def test_evidence_in_the_threads_window_counts_as_given(
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Asked in the user's latest thread, the evidence said there is in the window; evidence
    from an older thread can only come through recall."""
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")
    assert main(kims_evaluation(tmp_path)) == 0
    given = json.loads(capsys.readouterr().out)["context"]
    window, older = given["by_category"]["q1"], given["by_category"]["q2"]
    assert window == {
        "queries": 1,
        "evidence_in_context": 1.0,
        "in_recall": 0.0,
        "in_window": 1.0,
        "in_memories": 0.0,
        "summaries_shown": 0.0,
        "summary_share": 0.0,
    }
    assert older["in_window"] == 0.0
    assert (
        older["evidence_in_context"] == older["in_recall"] == 1.0
    )  # two older turns, both within the recall budget
    assert given["by_conversation"]["kim"]["queries"] == 2


def kims_evaluation(folder: Path) -> list[str]:
    """The command evaluating a small set of Kim's, written to ``folder``: three pairs in two
    threads, one question answered in the latest thread, one in the older."""
    said = [
        ("old", "My sister Ines lives in Lisbon", "Nice, Lisbon is lovely."),
        ("new", "I bought a red bicycle today", "Enjoy the rides!"),
        ("new", "The weather is grey", "Sorry to hear that."),
    ]
    turns = []
    for number, (thread, user_text, reply) in enumerate(said):
        for offset, (role, text) in enumerate((("user", user_text), ("assistant", reply))):
            at = f"2026-10-0{number + 1}T10:0{offset}:00+00:00"
            turns.append(
                {"id": f"{thread}-{number}-{role}", "user_id": "kim", "thread_id": f"chat:{thread}"}
                | {"role": role, "text": text, "at": at}
            )
    corpus, queries = folder / "corpus.jsonl", folder / "queries.jsonl"
    corpus.write_text("".join(json.dumps(turn) + "\n" for turn in turns))
    asked = [
        {"id": "q1", "query": "What colour is my bicycle?", "relevant": ["new-1-user"]},
        {"id": "q2", "query": "Where does my sister live?", "relevant": ["old-0-user"]},
    ]
    queries.write_text(
        "".join(json.dumps(q | {"user_id": "kim", "category": q["id"]}) + "\n" for q in asked)
    )
    return ["eval", "retrieval", "--corpus", str(corpus), "--queries", str(queries), "--json"]


def test_the_conversation_of_the_dev_demo_in_public_is_neither_read_nor_touched(
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """After `llm-bot dev` the database's ``public`` holds the demo's conversation beside the
    vector extension. The evaluation measures there what it measures on an empty database,
    and leaves those rows as they were."""
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")
    argv = kims_evaluation(tmp_path)
    assert main(argv) == 0
    on_an_empty_database = json.loads(capsys.readouterr().out)
    migrate(fresh_database_url)
    demo = tmp_path / "demo.jsonl"
    demo.write_text(
        "".join(
            json.dumps(
                {"id": f"demo-{role}", "user_id": "ada", "thread_id": "cli:lobby", "role": role}
                | {"text": text, "at": f"2026-10-01T10:0{minute}:00+00:00"}
            )
            + "\n"
            for minute, (role, text) in enumerate(
                (("user", "Hi, I am Ada. I love sailing"), ("assistant", "Hi Ada!"))
            )
        )
    )
    asyncio.run(_write_through_commit(settings_for(fresh_database_url), demo))
    before = _public_turns(fresh_database_url)
    assert [role for _, _, role, _ in before] == ["user", "assistant"]
    assert main(argv) == 0
    beside_the_demo = json.loads(capsys.readouterr().out)
    assert _without_latencies(beside_the_demo) == _without_latencies(on_an_empty_database)
    assert _public_turns(fresh_database_url) == before


async def _write_through_commit(settings: Settings, corpus: Path) -> None:
    async with open_memory_store(settings) as store:
        await load_through_commit(store, load_corpus(corpus), lambda _: None, settings)


def _public_turns(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as connection:
        return connection.execute(
            "SELECT thread_id, seq, role, content FROM public.conversation_turns ORDER BY 1, 2"
        ).fetchall()


def _without_latencies(result: dict[str, Any]) -> dict[str, Any]:
    """The measures but the time each query took, which differs from run to run."""
    modes = [{k: v for k, v in m.items() if k not in ("p50_ms", "p95_ms")} for m in result["modes"]]
    return result | {"modes": modes}


@pytest.mark.parametrize(
    ("option", "line", "problem"),
    [
        ("--corpus", '{"id": "t1", "user_id": "u"}', "{path}:1: missing thread_id, role, text, at"),
        (
            "--queries",
            '{"id": "q9", "user_id": "nobody", "query": "hi?", "relevant": ["x"]}',
            "query q9: user 'nobody' has no turn in the corpus",
        ),
    ],
)
def test_a_broken_evaluation_set_is_a_one_line_error(
    option: str, line: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(line + "\n")
    assert main(["eval", "retrieval", option, str(path)]) == 2
    error = capsys.readouterr().err.strip()
    expected = f"cannot read the evaluation set: {problem.format(path=path)}"
    assert error == f"llm-bot: error: {expected}"


@pytest.mark.parametrize("budgets", ["0,600", "600,lots"])
def test_a_bad_recall_budget_is_a_one_line_error(
    budgets: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "retrieval", "--recall-budgets", budgets])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "--recall-budgets" in error


def test_two_evaluations_started_together_both_finish_with_the_figures_of_one_alone(
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Each run loads, measures and drops a scratch schema of its own; neither sees or drops
    the other's tables while both are loading and asking."""
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")
    argv = kims_evaluation(tmp_path)
    assert main(argv) == 0
    alone = _without_latencies(json.loads(capsys.readouterr().out))
    command = [sys.executable, "-m", "llm_bot.cli", *argv]
    runs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert _without_latencies(json.loads(out)) == alone
    with psycopg.connect(fresh_database_url) as connection:
        left = connection.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'eval%'"
        ).fetchall()
    assert left == []
