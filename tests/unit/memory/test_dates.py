"""Months and years named in a question; "may" the verb is not May the month."""

from __future__ import annotations

import subprocess
import sys
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
