"""The recall section fills a token budget with the best candidates, in time order by day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from llm_bot.memory.budget import SCAN_FACTOR, recall_candidates, select_recalled
from llm_bot.memory.recall import RecalledTurn
from llm_bot.memory.rendering import RECALL_HEADER
from llm_bot.memory.validation import approx_tokens

MONDAY = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def turn(seq: int, content: str, *, days: int = 0, thread: str = "chat:a") -> RecalledTurn:
    at = MONDAY + timedelta(days=days, minutes=seq)
    return RecalledTurn(thread, seq, "user", content, at, 0.5, 1.0 / seq)


def test_candidates_are_taken_best_first_until_the_budget_and_shown_oldest_first() -> None:
    best, second, third = turn(3, "a" * 40), turn(1, "b" * 40, days=1), turn(2, "c" * 40)
    budget = approx_tokens(select_recalled([best, second], 10_000).text)
    selection = select_recalled([best, second, third], budget)
    assert selection.turns == [best, second]  # the third is the one that did not fit
    assert approx_tokens(selection.text) <= budget
    assert selection.left_out == {"duplicate": 0, "over_budget": 1}
    assert selection.text.splitlines() == [
        RECALL_HEADER,
        "Monday 2026-03-02:",
        f'user: "{"a" * 40}"',
        "Tuesday 2026-03-03:",
        f'user: "{"b" * 40}"',
    ]


def test_a_long_turn_that_does_not_fit_gives_way_to_shorter_ones_after_it() -> None:
    short, long, shorter = turn(1, "x" * 40), turn(2, "y" * 4000), turn(3, "z" * 20)
    selection = select_recalled([short, long, shorter], 100)
    assert selection.turns == [short, shorter]
    assert selection.left_out["over_budget"] == 1


def test_the_same_words_said_again_are_given_once() -> None:
    first, again = turn(1, "My number is 555-0100"), turn(2, "my number  is 555-0100", days=3)
    selection = select_recalled([first, again], 10_000)
    assert selection.turns == [first]
    assert selection.left_out == {"duplicate": 1, "over_budget": 0}


def test_a_conversations_turns_of_one_day_stay_under_one_day_line() -> None:
    turns = [turn(1, "a1"), turn(2, "b2", thread="chat:b"), turn(3, "a3")]
    lines = select_recalled(turns, 10_000).text.splitlines()
    assert lines[1:] == [
        "Monday 2026-03-02:",
        'user: "a1"',
        'user: "a3"',
        "Monday 2026-03-02:",  # the other conversation of that day
        'user: "b2"',
    ]


def test_nothing_recalled_is_no_section() -> None:
    selection = select_recalled([turn(1, "x" * 400)], 20)
    assert (selection.turns, selection.text) == ([], "")


def test_a_bigger_budget_ranks_more_candidates() -> None:
    assert recall_candidates(0) >= 1
    assert recall_candidates(3000) > recall_candidates(1000) > recall_candidates(100)


def test_candidates_past_twice_the_count_the_budget_is_sized_for_are_not_looked_at() -> None:
    budget = 10_000
    looked_at = SCAN_FACTOR * recall_candidates(budget)
    candidates = [turn(seq, f"w{seq}") for seq in range(1, looked_at + 11)]
    selection = select_recalled(candidates, budget)
    assert selection.turns == candidates[:looked_at]
    assert selection.left_out == {"duplicate": 0, "over_budget": 10}


def test_a_turn_a_shown_memory_cites_is_left_out_as_already_given() -> None:
    cited, other = turn(1, "I moved to Lisbon in May"), turn(2, "the weather is fine")
    selection = select_recalled([cited, other], 10_000, cited={("chat:a", 1)})
    assert selection.turns == [other]
    assert selection.left_out == {"duplicate": 1, "over_budget": 0}
