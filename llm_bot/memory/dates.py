"""Dates named in a question ("in June", "last May", "in 2023") as a preference for turns of then.

Neither side of recall reads a date: the embedding of "camping in June" is close to any
camping, and "june" is a word of the turn only if the turn says it, while the turn that tells
of the trip was written in June and says "this weekend". Every turn has its time, so a turn
written in a month (or year) the question names gains ``DATE_BONUS`` on the fused scale
(where the best candidate scores 1): a preference among candidates that match on their words
or meaning, never a filter, because people also tell in July what they did in June.

Absolute names: a month (English, capitalised "May" only where it is plainly the month: "in
May", "last May", "May 2023"), a year (1900-2099). "Last May" is any May: in a history of one
year it is the same month.

Relative names are resolved against the time the question is asked, passed in (the event's
``ingressAt``, :func:`llm_bot.events.inbound.asked_at_of`, so a backlog does not move
"yesterday"; the clock of context assembly where an event gives none; recall reads no clock of
its own), each into a
span of days around what it names, as people say them loosely: "today", "this morning",
"tonight"; "yesterday", "last night"; a weekday ("on Monday", "last Friday": the latest one
before the day of asking); "this/last week, weekend, month, year" (calendar weeks from
Monday); "N days/weeks/months/years ago" (N a number, "a", "a couple of", "a few", or one to
twelve in words), a day either side for days, three for weeks, half a month for months and
half a year for years. Without the time of asking, only the
absolute names count.

The question is user text, so hostile: the work is linear in its length (whether "May" is the
month is decided once per text, not once per "may"), and recall gives it no more of the text
than its words are searched by (:data:`llm_bot.db.hybrid.QUERY_MAX_CHARS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

DATE_BONUS = 0.25

MONTHS = (
    *("january", "february", "march", "april", "may", "june"),
    *("july", "august", "september", "october", "november", "december"),
)
MAY = MONTHS.index("may") + 1
_MONTH = re.compile(r"\b(" + "|".join(MONTHS) + r")\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
# "may" is also a verb: the month only when capitalised beside a preposition or a number.
_MAY = re.compile(r"\b(in|of|last|early|late|since|during|mid|by|until|from)\s+May\b|\bMay\s+\d")


WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
COUNTS = (
    *("one", "two", "three", "four", "five", "six"),
    *("seven", "eight", "nine", "ten", "eleven", "twelve"),
)
_TODAY = re.compile(r"\b(today|this\s+(morning|afternoon|evening)|tonight)\b", re.IGNORECASE)
_YESTERDAY = re.compile(r"\b(yesterday|last\s+night)\b", re.IGNORECASE)
_WEEKDAY = re.compile(r"\b(" + "|".join(WEEKDAYS) + r")\b", re.IGNORECASE)
_THIS_OR_LAST = re.compile(r"\b(this|last|past)\s+(week|weekend|month|year)\b", re.IGNORECASE)
_AGO = re.compile(
    r"\b(\d{1,3}|an?|(?:a\s+)?couple\s+of|a\s+few|" + "|".join(COUNTS) + r")"
    r"\s+(day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)
DAY = timedelta(days=1)
# "N units ago" by unit: the days a unit counts back, and the days either side of where it lands
# (how loosely people count back).
_AGO_DAYS_AND_SLACK = {"day": (1, 1), "week": (7, 3), "month": (30, 15), "year": (365, 182)}

Span = tuple[datetime, datetime]  # from, until (excluded)


@dataclass(frozen=True)
class DateWindow:
    """Months and years named (a moment of a named month in a named year), or spans of days
    resolved from relative names: a moment in either is in the window."""

    months: frozenset[int]
    years: frozenset[int]
    spans: tuple[Span, ...] = ()

    def holds(self, moment: datetime) -> bool:
        named = bool(self.months or self.years) and (
            (not self.months or moment.month in self.months)
            and (not self.years or moment.year in self.years)
        )
        return named or any(start <= moment < end for start, end in self.spans)


def date_window(text: str, asked_at: datetime | None = None) -> DateWindow | None:
    """The months and years ``text`` names, and the spans its relative names cover when it was
    asked at ``asked_at``; None when it names none."""
    months = {MONTHS.index(month.lower()) + 1 for month in _MONTH.findall(text)}
    if MAY in months and _MAY.search(text) is None:
        months.remove(MAY)
    years = {int(year) for year in _YEAR.findall(text)}
    spans = relative_spans(text, asked_at) if asked_at is not None else ()
    if not months and not years and not spans:
        return None
    return DateWindow(frozenset(months), frozenset(years), spans)


def relative_spans(text: str, asked_at: datetime) -> tuple[Span, ...]:
    """The spans of days the relative names of ``text`` cover, asked at ``asked_at``."""
    today = asked_at.replace(hour=0, minute=0, second=0, microsecond=0)
    spans: list[Span] = []
    if _TODAY.search(text):
        spans.append((today, today + DAY))
    if _YESTERDAY.search(text):
        spans.append((today - DAY, today))
    for name in {match.lower() for match in _WEEKDAY.findall(text)}:
        back = (today.weekday() - WEEKDAYS.index(name) - 1) % 7 + 1
        spans.append((today - back * DAY, today - (back - 1) * DAY))
    for which, unit in {(w.lower(), u.lower()) for w, u in _THIS_OR_LAST.findall(text)}:
        spans.append(_calendar_span(today, unit, last=which != "this"))
    for count, unit in _AGO.findall(text):
        days, slack = _AGO_DAYS_AND_SLACK[unit.lower()]
        middle = today - _count(count) * days * DAY
        spans.append((middle - slack * DAY, middle + (slack + 1) * DAY))
    return tuple(spans)


def _calendar_span(today: datetime, unit: str, *, last: bool) -> Span:
    """This or the last calendar week (from Monday), weekend, month or year of ``today``."""
    if unit in ("week", "weekend"):
        monday = today - (today.weekday() + (7 if last else 0)) * DAY
        start = monday + 5 * DAY if unit == "weekend" else monday
        return start, monday + 7 * DAY
    if unit == "month":
        first = today.replace(day=1)
        if last:
            first = (first - DAY).replace(day=1)
        return first, (first + 32 * DAY).replace(day=1)
    year = today.year - 1 if last else today.year
    return today.replace(year=year, month=1, day=1), today.replace(year=year + 1, month=1, day=1)


def _count(word: str) -> int:
    """A count as "N units ago" says it: digits, "a"/"an", "a couple of", "a few", or a word."""
    word = " ".join(word.lower().split())
    if word.isdigit():
        return int(word)
    if word in ("a", "an"):
        return 1
    if word.endswith("couple of"):
        return 2
    if word == "a few":
        return 3
    return COUNTS.index(word) + 1
