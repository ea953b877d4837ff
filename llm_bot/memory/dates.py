"""Dates named in a question ("in June", "last May", "in 2023") as a preference for turns of then.

Neither side of recall reads a date: the embedding of "camping in June" is close to any
camping, and "june" is a word of the turn only if the turn says it, while the turn that tells
of the trip was written in June and says "this weekend". Every turn has its time, so a turn
written in a month (or year) the question names gains ``DATE_BONUS`` on the fused scale
(where the best candidate scores 1): a preference among candidates that match on their words
or meaning, never a filter, because people also tell in July what they did in June.

Only absolute names are read: a month (English, capitalised "May" only where it is plainly
the month: "in May", "last May", "May 2023"), a year (1900-2099). "Last May" is any May:
recall has no clock of its own, and in a history of one year it is the same month.

The question is user text, so hostile: the work is linear in its length (whether "May" is the
month is decided once per text, not once per "may"), and recall gives it no more of the text
than its words are searched by (:data:`llm_bot.memory.search.QUERY_MAX_CHARS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

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


@dataclass(frozen=True)
class DateWindow:
    months: frozenset[int]
    years: frozenset[int]

    def holds(self, moment: datetime) -> bool:
        return (not self.months or moment.month in self.months) and (
            not self.years or moment.year in self.years
        )


def date_window(text: str) -> DateWindow | None:
    """The months and years ``text`` names, or None when it names none."""
    months = {MONTHS.index(month.lower()) + 1 for month in _MONTH.findall(text)}
    if MAY in months and _MAY.search(text) is None:
        months.remove(MAY)
    years = {int(year) for year in _YEAR.findall(text)}
    if not months and not years:
        return None
    return DateWindow(frozenset(months), frozenset(years))
