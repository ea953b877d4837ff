"""The kind of question a query is, for the per-category breakdown of ``llm-bot eval retrieval``.

A query of the evaluation set may name its ``category``; LoCoMo's converted queries do not, so
for those the kind is inferred by rules that read only the question and how many evidence turns
it has, in this order (the first that applies):

1. **temporal**: asks for a time: begins with "when", asks "what/which date, day, week, month,
   year, time", "how long" or "how many days/weeks/months/years";
2. **open-domain**: asks for an inference, not a recorded fact: "would", "likely", "might",
   "could", "probably";
3. **multi-hop**: needs more than one evidence turn;
4. **single-hop**: everything else.

The report says which categories were inferred, so a reader does not take them for labels.
"""

from __future__ import annotations

import re

TEMPORAL = re.compile(
    r"^\s*when\b"
    r"|\b(what|which)\s+(date|day|week|month|year|time)\b"
    r"|\bhow\s+long\b"
    r"|\bhow\s+many\s+(days|weeks|months|years)\b",
    re.IGNORECASE,
)
INFERENCE = re.compile(r"\b(would|likely|might|could|probably)\b", re.IGNORECASE)


def inferred_category(query: str, evidence_turns: int) -> str:
    """The category of a query that does not name one (rules in the module docstring)."""
    if TEMPORAL.search(query):
        return "temporal"
    if INFERENCE.search(query):
        return "open-domain"
    if evidence_turns > 1:
        return "multi-hop"
    return "single-hop"
