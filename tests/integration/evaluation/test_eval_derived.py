"""`llm-bot eval retrieval --derived`: the same queries without and with derived items, through
the real embedded Postgres and the local embedding model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_bot.cli import main
from llm_bot.memory.store import MemoryStore
from llm_bot_tools.evaluation.derived import load_derived, write_derived
from llm_bot_tools.evaluation.retrieval import load_corpus, load_through_commit

from ...from_settings import settings_for

pytestmark = pytest.mark.integration

SAID = [  # (thread, day, user's words, reply)
    ("chat:trip", 1, "We booked everything for the big day in April", "Wonderful news!"),
    ("chat:trip", 1, "The hotel is next to the old temple", "Sounds lovely."),
    ("chat:home", 2, "The weather is grey today", "Sorry to hear that."),
    ("chat:home", 2, "I bought a red bicycle", "Enjoy the rides!"),
    ("chat:now", 3, "Hello again", "Hi!"),
]


def corpus_and_queries(tmp_path: Path) -> tuple[Path, Path]:
    turns = []
    for number, (thread, day, user_text, reply) in enumerate(SAID):
        for offset, (role, text) in enumerate((("user", user_text), ("assistant", reply))):
            turns.append(
                {"id": f"t{number}{role[0]}", "user_id": "kim", "thread_id": thread}
                | {"role": role, "text": text, "at": f"2026-10-0{day}T10:{number}{offset}:00Z"}
            )
    corpus, queries = tmp_path / "corpus.jsonl", tmp_path / "queries.jsonl"
    corpus.write_text("".join(json.dumps(turn) + "\n" for turn in turns))
    asked = [  # "honeymoon" and "Kyoto" are only in the summary
        {"id": "q1", "query": "Kyoto honeymoon", "relevant": ["t0u"], "category": "summary"},
        {"id": "q2", "query": "What colour is my bike?", "relevant": ["t3u"], "category": "fact"},
    ]
    queries.write_text("".join(json.dumps(q | {"user_id": "kim"}) + "\n" for q in asked))
    return corpus, queries


def test_derived_items_are_measured_beside_the_same_corpus_and_counted_by_what_they_cite(
    fresh_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_PROVIDER", "local")
    corpus, queries = corpus_and_queries(tmp_path)
    derived = tmp_path / "derived.jsonl"
    items = [
        {"kind": "summary", "thread_id": "chat:trip", "sources": ["t0u", "t0a", "t1u", "t1a"]}
        | {"text": "Kim planned the Kyoto honeymoon for April: everything booked."},
        {"kind": "fact", "thread_id": "chat:home", "sources": ["t3u"]}
        | {"text": "Kim owns a red bicycle."},
        # The same window again: consolidation's statement skips it, and the count says so.
        {"kind": "summary", "thread_id": "chat:trip", "sources": ["t1u", "t1a"]}
        | {"text": "Kim's hotel is next to the temple."},
    ]
    derived.write_text("".join(json.dumps(i | {"user_id": "kim"}) + "\n" for i in items))
    argv = ["eval", "retrieval", "--corpus", str(corpus), "--queries", str(queries)]
    budgets = ["--recall-budgets", "40,400", "--plot", str(tmp_path / "eval.png")]
    assert main([*argv, "--k", "2", "--derived", str(derived), *budgets, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["derived"]["loaded"] == {"facts": 1, "summaries": 1}
    before = {r["mode"]: r for r in result["modes"]}["lexical"]
    after = {r["mode"]: r for r in result["derived"]["modes"]}["lexical"]
    # The query's words are only the summary's: without it the words find nothing; with it
    # the summary is recalled, and counts as no evidence turn itself.
    assert before["by_category"]["summary"]["recall_at_k"] == 0.0
    assert before["summaries_at_k"] == 0.0
    assert after["summaries_at_k"] > 0
    given, derived_given = result["context"], result["derived"]["context"]
    assert given["overall"]["in_memories"] == given["overall"]["summaries_shown"] == 0.0
    fact = derived_given["by_category"]["fact"]
    assert fact["in_memories"] == fact["evidence_in_context"] == 1.0
    summary = derived_given["by_category"]["summary"]
    assert summary["in_memories"] == 0.0
    assert summary["summaries_shown"] == 1.0
    assert 0 < summary["summary_share"] < 1
    # The memories section's tokens beside the recall section's: none without a fact, some with.
    assert given["memory_tokens_p95"] == 0
    assert derived_given["memory_tokens_p95"] > 0
    # Each recall budget asked for is measured without and with the derived items.
    [at_budget, _], [derived_at_budget, _] = result["budgets"], result["derived"]["budgets"]
    # Drawn against the two sections' tokens, without and with the derived items.
    assert (tmp_path / "eval-budgets.png").stat().st_size > 10_000
    assert at_budget["recall_budget_tokens"] == derived_at_budget["recall_budget_tokens"] == 40
    # The recall section's budget and what the memories left of theirs (1,000 by default).
    assert (
        derived_at_budget["recall_tokens_p95"] <= 40 + 1000 - derived_at_budget["memory_tokens_p50"]
    )


async def test_a_file_s_facts_get_the_same_keys_in_every_load(
    memory_store: MemoryStore, migrated_database_url: str, tmp_path: Path
) -> None:
    """Memory search breaks ties by key: a fact without a key of its own gets one from its place
    in the file, so a measurement with the same file ranks the same way every run."""
    corpus_path, _ = corpus_and_queries(tmp_path)
    corpus = load_corpus(corpus_path)
    derived = tmp_path / "derived.jsonl"
    facts = [("t2u", "Kim finds grey weather gloomy."), ("t3u", "Kim owns a red bicycle.")]
    item = {"kind": "fact", "user_id": "kim", "thread_id": "chat:home"}
    lines = (json.dumps(item | {"sources": [source], "text": text}) for source, text in facts)
    derived.write_text("".join(line + "\n" for line in lines))
    ids = await load_through_commit(
        memory_store, corpus, lambda _: None, settings_for(migrated_database_url)
    )
    kim = memory_store.for_user("kim")

    async def keys_of_a_load() -> dict[str, str]:
        await write_derived(memory_store, load_derived(derived, corpus), ids)
        held = {memory.content: memory.key for memory in await kim.list_memories()}
        for key in held.values():
            await kim.delete(key)
        return held

    first = await keys_of_a_load()
    assert sorted(first) == sorted(text for _, text in facts)
    assert all(len(key) == 13 for key in first.values())  # a new key's length
    assert await keys_of_a_load() == first


def test_a_bad_derived_line_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, queries = corpus_and_queries(tmp_path)
    derived = tmp_path / "derived.jsonl"
    derived.write_text('{"kind": "fact", "user_id": "kim", "thread_id": "chat:home"}\n')
    argv = ["eval", "retrieval", "--corpus", str(corpus), "--queries", str(queries)]
    assert main([*argv, "--derived", str(derived)]) == 2
    error = capsys.readouterr().err.strip()
    expected = f"cannot read the evaluation set: {derived}:1: missing sources, text"
    assert error == f"llm-bot: error: {expected}"


def test_standin_summaries_are_one_per_thread_over_all_its_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, _ = corpus_and_queries(tmp_path)
    out = tmp_path / "out" / "standin.jsonl"
    argv = ["eval", "standin-summaries", "--corpus", str(corpus), "--out", str(out)]
    assert main(argv) == 0
    first = out.read_text()
    assert main(argv) == 0
    assert out.read_text() == first  # deterministic
    items = [json.loads(line) for line in first.splitlines()]
    assert [(i["kind"], i["thread_id"], len(i["sources"])) for i in items] == [
        ("summary", "chat:trip", 4),
        ("summary", "chat:home", 4),
        ("summary", "chat:now", 2),
    ]
    assert items[0]["text"].startswith("Conversation on 01 October 2026.")
    assert "3 stand-in summaries" in capsys.readouterr().out
