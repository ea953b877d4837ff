"""Recall's fusion: scores (not ranks) averaged after scaling, neighbours within a thread, and a
corrected turn's scores given to the later turns that replace it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from llm_bot.memory.fusion import corrected, fused, replaced, with_neighbours, with_pairs

AT = datetime(2026, 5, 1, 12, tzinfo=UTC)


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


def test_a_corrected_turn_and_the_later_turns_that_replace_it_trade_places() -> None:
    may, sept, reply = ("a", 1), ("b", 1), ("b", 2)
    written = {may: AT, sept: AT + timedelta(days=120), reply: AT + timedelta(days=120)}
    outdated = replaced({may: [sept, ("b", 9)]}, written)  # b#9: not a candidate (not visible)
    assert outdated == {may: [sept]}
    assert corrected({may: 0.9, sept: 0.1, reply: 0.2}, outdated) == {
        may: 0.1,  # no higher than the correction would have been by itself
        sept: 0.9,
        reply: 0.2,
    }
    # Where the correction scores better by itself, both keep their own.
    assert corrected({may: 0.3, sept: 0.5, reply: 0.2}, outdated) == {
        may: 0.3,
        sept: 0.5,
        reply: 0.2,
    }


def test_several_corrections_of_several_turns_are_read_from_the_scores_before_any_trade() -> None:
    old, older, new, newer = ("a", 1), ("a", 3), ("b", 1), ("b", 3)
    outdated = {old: [new, newer], older: [new]}
    scores = {old: 0.8, older: 0.6, new: 0.1, newer: 0.4}
    assert corrected(scores, outdated) == {old: 0.1, older: 0.1, new: 0.8, newer: 0.8}


def test_a_turn_is_outdated_only_by_a_later_candidate() -> None:
    old, new = ("a", 1), ("b", 1)
    assert replaced({new: [old]}, {old: AT, new: AT + timedelta(days=1)}) == {}  # earlier
    assert replaced({old: [new]}, {old: AT}) == {}  # the replacement is no candidate
    assert replaced({old: [new]}, {new: AT}) == {}  # nor the turn itself


def test_the_reply_in_a_corrected_pair_is_replaced_by_the_replies_to_the_correction() -> None:
    old, old_reply, new, new_reply = ("a", 1), ("a", 2), ("b", 1), ("b", 2)
    partner = {old: old_reply, old_reply: old, new: new_reply, new_reply: new}
    extended = with_pairs({old: [new]}, partner)
    assert extended == {old: [new], old_reply: [new_reply]}
    assert with_pairs({old: [new]}, {old: old_reply}) == {old: [new]}  # no reply to take it
    # A reply outdated in its own right keeps what replaces it; one that replaces stays.
    assert with_pairs({old: [new], old_reply: [("c", 1)]}, partner)[old_reply] == [("c", 1)]
    assert with_pairs({old: [old_reply]}, partner) == {old: [old_reply]}
