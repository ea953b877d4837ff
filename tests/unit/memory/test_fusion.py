"""Recall's fusion: scores (not ranks) averaged after scaling, and neighbours within a thread."""

from __future__ import annotations

from llm_bot.memory.fusion import fused, with_neighbours


def test_how_far_ahead_a_turn_is_counts_not_only_its_place() -> None:
    # Reciprocal-rank fusion ranks "b" (2nd on both sides) above "a" (1st and 3rd) whatever
    # the scores; scaled scores put "a" first when it is far ahead where it leads and close
    # behind where it does not.
    dense = {"a": 0.90, "b": 0.40, "c": 0.20}
    lexical = {"c": 9.0, "b": 8.9, "a": 8.0}
    ranking = fused(dense, lexical, use_dense=True, use_lexical=True)
    assert ranking["a"] > ranking["b"] > ranking["c"]
    assert ranking["a"] == (1.0 + 8.0 / 9.0) / 2


def test_a_side_that_is_off_or_empty_contributes_nothing() -> None:
    dense = {"a": 0.2, "b": 0.4}
    lexical = {"a": 5.0}
    assert fused(dense, lexical, use_dense=True, use_lexical=False) == {"a": 0.5, "b": 1.0}
    assert fused(dense, lexical, use_dense=False, use_lexical=True) == {"a": 1.0, "b": 0.0}
    assert fused(dense, {}, use_dense=True, use_lexical=True) == {"a": 0.25, "b": 0.5}


def test_neighbours_lift_a_turn_within_reach_in_its_own_thread_only() -> None:
    scores = {("t", 1): 0.0, ("t", 2): 4.0, ("t", 3): 0.0, ("t", 5): 0.0, ("u", 3): 0.0}
    smoothed = with_neighbours(scores, reach=2)
    assert smoothed[("t", 1)] == 2.0  # half of the best within two turns
    assert smoothed[("t", 3)] == 2.0
    assert smoothed[("t", 2)] == 4.0  # its own score, no neighbour scores more than 0
    assert smoothed[("t", 5)] == 0.0  # three turns away
    assert smoothed[("u", 3)] == 0.0  # another thread
