"""An explanation record as stored: what a recalled turn's correction adds reads back as it was
written, and a record written without it (most turns, and records older than it) still reads."""

from __future__ import annotations

from llm_bot.explanation.record import ContextSources, Record, Scores, TurnSource


def test_a_turn_a_correction_moved_reads_back_with_the_turns_it_traded_places_with() -> None:
    scores = Scores(dense_rank=3, lexical_rank=None, similarity=0.41, fused=0.62)
    recalled = (
        TurnSource("dm:ada", 6, scores, replaces=(("dm:ada", 2),)),
        TurnSource("dm:ada", 1, scores, replaced_by=(("dm:ada", 5), ("lobby", 9))),
        TurnSource("dm:ada", 3, scores),
    )
    record = Record("step", context=ContextSources(recalled=recalled))

    stored = record.to_json()

    assert stored["recalled"][0][-1] == {"replaces": [["dm:ada", 2]]}
    assert stored["recalled"][2] == ["dm:ada", 3, 3, None, 0.41, 0.62]
    assert Record.from_json(stored).context.recalled == recalled


def test_a_record_without_corrections_reads_as_before() -> None:
    stored = {"recalled": [["dm:ada", 4, 1, 2, 0.5, 0.7]], "window": [["dm:ada", 8]]}

    context = Record.from_json(stored).context

    assert context.recalled == (TurnSource("dm:ada", 4, Scores(1, 2, 0.5, 0.7)),)
    assert context.window == (TurnSource("dm:ada", 8),)
