"""Months and years named in a question ("may" the verb is not May the month), and relative
dates ("yesterday", "two weeks ago") placed from when the question was asked."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

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


@pytest.mark.parametrize(
    ("text", "months"),
    [("may I ask what we did in May?", {5}), ("may " * 3 + "june", {6}), ("May 3rd, may", {5})],
)
def test_may_is_the_month_wherever_the_text_says_so_once(text: str, months: set[int]) -> None:
    window = date_window(text)
    assert window is not None
    assert window.months == months


# In a child process, so a blow-up fails the test instead of stalling it: searching the whole
# text again for every "may" took 32 s on this one (96 KB, within an event's size limit).
MANY_MAYS = """
from llm_bot.memory.dates import date_window
print(date_window("may " * 24_000 + "in 2023"))
"""


def test_a_text_of_many_mays_costs_time_linear_in_its_length() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MANY_MAYS], capture_output=True, text=True, timeout=20, check=True
    )
    assert "years=frozenset({2023})" in done.stdout


THURSDAY = datetime(2026, 10, 15, 9, 3, tzinfo=UTC)  # when the question is asked


def day(month: int, day: int, year: int = 2026) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("What did I cook tonight?", day(10, 15), day(10, 16)),
        ("what did I say this morning", day(10, 15), day(10, 16)),
        ("What did I tell you yesterday?", day(10, 14), day(10, 15)),
        ("Where was I last night?", day(10, 14), day(10, 15)),
        ("What did I say on Monday?", day(10, 12), day(10, 13)),
        ("what about last THURSDAY", day(10, 8), day(10, 9)),  # the latest before today
        ("What did I do last weekend?", day(10, 10), day(10, 12)),
        ("What happened last week?", day(10, 5), day(10, 12)),
        ("anything this week?", day(10, 12), day(10, 19)),
        ("What did I buy last month?", day(9, 1), day(10, 1)),
        ("Where did I go last year?", day(1, 1, 2025), day(1, 1, 2026)),
        ("What did I say 3 days ago?", day(10, 11), day(10, 14)),
        ("the order I gave you two weeks ago", day(9, 28), day(10, 5)),
        ("a couple of months ago I moved", day(8, 1), day(9, 1)),
        (
            "A few years ago",  # three years back, half a year either side
            day(10, 15) - timedelta(days=3 * 365 + 182),
            day(10, 15) - timedelta(days=3 * 365 - 183),
        ),
    ],
)
def test_a_relative_date_is_a_span_of_days_before_the_question(
    text: str, start: datetime, end: datetime
) -> None:
    window = date_window(text, THURSDAY)
    assert window is not None
    assert window.spans == ((start, end),)
    assert window.holds(start)
    assert window.holds(end - timedelta(microseconds=1))
    assert not window.holds(start - timedelta(microseconds=1))
    assert not window.holds(end)


def test_without_the_time_of_asking_only_months_and_years_are_read() -> None:
    assert date_window("What did I tell you yesterday?") is None
    assert date_window("what did I say last week about June?") == DateWindow(
        frozenset({6}), frozenset()
    )


def test_a_named_month_and_a_relative_date_each_hold_their_own_moments() -> None:
    window = date_window("in June, or yesterday?", THURSDAY)
    assert window is not None
    assert window.holds(day(6, 3))
    assert window.holds(day(10, 14))
    assert not window.holds(day(10, 13))


@pytest.mark.parametrize("text", ["ago", "a week", "days ago", "several weeks ago", "next week"])
def test_words_that_name_no_day_before_the_question_name_none(text: str) -> None:
    assert date_window(text, THURSDAY) is None
