"""``llm-bot eval attribution``: the shipped labelled sets through consolidation's own check,
their figures as JSON and as a plot, and a set that cannot be read said in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_bot.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_the_shipped_sets_store_no_false_attribution_and_keep_nine_in_ten_true_ones(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(ROOT)
    plot = tmp_path / "attribution.png"
    assert main(["eval", "attribution", "--json", "--plot", str(plot)]) == 0
    sets = json.loads(capsys.readouterr().out)["sets"]
    assert len(sets) == 3
    true = sum(s["overall"]["true_stored"] + s["overall"]["true_dropped"] for s in sets)
    kept = sum(s["overall"]["true_stored"] for s in sets)
    assert sum(s["overall"]["false_stored"] for s in sets) == 0
    assert kept / true >= 0.9
    for report in sets:
        classes = report["by_class"]
        assert {"neighbour_words", "assistant_paraphrase", "quoted_other"} <= set(classes)
        assert {"says_nothing", "merged_speakers", "own_words"} <= set(classes)
    assert plot.read_bytes().startswith(b"\x89PNG")


TURN = {"seq": 1, "user": "mira", "role": "user", "text": "i'm allergic to shellfish"}
ITEM = {
    "id": "x",
    "class": "own_words",
    "label": True,
    "kind": "dm",
    "turns": [TURN],
    "fact": {"text": "Is allergic to shellfish.", "sources": [1]},
}


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("not json", ""),
        (json.dumps(ITEM | {"label": "yes"}), "label must be a JSON true or false"),
        (json.dumps(ITEM | {"kind": "room"}), "kind must be one of dm, channel"),
        (json.dumps(ITEM | {"turns": []}), "turns must not be empty"),
        (json.dumps(ITEM | {"turns": [TURN | {"seq": 10**20}]}), "seq must be a whole number"),
        (json.dumps(ITEM | {"turns": [TURN | {"seq": 1.7}]}), "seq must be a JSON whole number"),
        (json.dumps(ITEM | {"turns": [TURN | {"seq": True}]}), "seq must be a JSON whole number"),
        (json.dumps(ITEM | {"turns": [TURN | {"text": None}]}), "text must be a JSON string"),
        (json.dumps(ITEM | {"turns": [TURN | {"role": "bot"}]}), "role must be user or"),
        (json.dumps(ITEM | {"turns": ["hi"]}), "expected a JSON object holding seq"),
        (json.dumps(ITEM | {"fact": "x"}), "fact must be a JSON object"),
        (json.dumps(ITEM | {"fact": {"text": "x", "sources": "1"}}), "sources must be a JSON"),
        (json.dumps(ITEM | {"fact": {"text": "x", "sources": [0]}}), "non-empty list of seqs"),
        (json.dumps(ITEM).replace('"seq": 1', '"seq": 1e400'), "seq must be a JSON whole"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_set_that_cannot_be_read_is_one_line_and_exit_2(
    line: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ITEM) + "\n" + line + "\n", encoding="utf-8")
    assert main(["eval", "attribution", "--set", str(bad)]) == 2
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0
    assert "bad.jsonl:2" in said
    assert error in said


def test_a_well_formed_item_is_judged(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(ITEM) + "\n", encoding="utf-8")
    assert main(["eval", "attribution", "--set", str(good), "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)["sets"]
    assert report["overall"]["true_stored"] == 1


@pytest.mark.parametrize("line", ["[1]", '"fact"'])
def test_derived_facts_that_are_not_objects_are_one_line_and_exit_2(
    line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, derived = tmp_path / "corpus.jsonl", tmp_path / "derived.jsonl"
    turn = {"id": "t1", "thread_id": "s1", "text": "Mira: hi", "at": "2026-10-01T10:00:00+00:00"}
    corpus.write_text(json.dumps(turn) + "\n", encoding="utf-8")
    derived.write_text(line + "\n", encoding="utf-8")
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(ITEM) + "\n", encoding="utf-8")
    argv = ["eval", "attribution", "--set", str(good), "--corpus", str(corpus)]
    assert main([*argv, "--derived", str(derived)]) == 2
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0
    assert "derived.jsonl:1: not a JSON object" in said
