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


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        json.dumps({"id": "x", "class": "c", "label": "yes", "kind": "dm", "turns": []}),
        json.dumps({"id": "x", "class": "c", "label": True, "kind": "room", "turns": []}),
    ],
)
def test_a_set_that_cannot_be_read_is_one_line_and_exit_2(
    line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line + "\n", encoding="utf-8")
    assert main(["eval", "attribution", "--set", str(bad)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0
    assert "bad.jsonl:1" in error
