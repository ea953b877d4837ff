"""Months and years named in a question; "may" the verb is not May the month."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llm_bot.memory.dates import DateWindow, date_window


@pytest.mark.parametrize(
    ("text", "months", "years"),
    [
        ("When did she go camping in June?", {6}, set()),
        ("What did I tell you last May?", {5}, set()),
        ("How many times did he surf in 2023?", set(), {2023}),
        ("What did we paint in July 2023?", {7}, {2023}),
        ("Between March and April, where was I?", {3, 4}, set()),
    ],
)
def test_names_of_months_and_years(text: str, months: set[int], years: set[int]) -> None:
    assert date_window(text) == DateWindow(frozenset(months), frozenset(years))


@pytest.mark.parametrize("text", ["What may I bring?", "May I ask about my order?", "Hi there"])
def test_no_date(text: str) -> None:
    assert date_window(text) is None


def test_a_window_holds_the_moments_of_its_months_in_its_years() -> None:
    june = date_window("in June 2023")
    assert june is not None
    assert june.holds(datetime(2023, 6, 30, 23, tzinfo=UTC))
    assert not june.holds(datetime(2023, 7, 1, tzinfo=UTC))
    assert not june.holds(datetime(2024, 6, 1, tzinfo=UTC))
