"""Extractive stand-in session summaries: what ``--derived`` loads when no model ran.

One summary per thread of a corpus (a LoCoMo session is a thread): the day it began, who spoke
(the name before a text's first colon, as LoCoMo's texts carry it), its ``SENTENCES`` most
distinctive turns and its ``WORDS`` most distinctive words. Distinctive is TF-IDF against the
other threads of the same user (a conversation), so a word every session of a conversation says
weighs nothing. No model writes these: a recall figure measured with them is one of extractive
summaries as recall keys, not of what a model's summaries would do. Deterministic: the same
corpus gives the same file.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from llm_bot_tools.evaluation.retrieval import CorpusTurn

SENTENCES = 3
WORDS = 12
MAX_SENTENCE_CHARS = 200
WORD = re.compile(r"[a-z][a-z'-]{2,}")
# Words that say nothing about what a session was about, whatever their frequency.
_STOPWORDS = """about after again also and any are because been before being but can can't could did
    didn't does doesn't doing don't for from get got had has have having her here hers him his
    how i'm i've it's its just let like more most much not now off one our out over really she
    should some such than that that's the their them then there these they this those too very
    was wasn't way we're were what when where which while who why will with would yeah yes you
    you're your yours"""
STOPWORDS = frozenset(_STOPWORDS.split())


def standin_summaries(corpus: Sequence[CorpusTurn]) -> list[dict[str, Any]]:
    """One ``summary`` item (the ``--derived`` format) per thread, in the corpus's order."""
    threads: dict[str, list[CorpusTurn]] = {}
    for turn in corpus:
        threads.setdefault(turn.thread_id, []).append(turn)
    words = {
        thread: Counter(_words(" ".join(_said(t) for t in turns)))
        for thread, turns in threads.items()
    }
    by_user: dict[str, list[str]] = {}
    for thread, turns in threads.items():
        by_user.setdefault(turns[0].user_id, []).append(thread)
    items = []
    for thread, turns in threads.items():
        siblings = by_user[turns[0].user_id]
        weight = _tf_idf(words[thread], [words[other] for other in siblings])
        items.append(
            {
                "kind": "summary",
                "user_id": turns[0].user_id,
                "thread_id": thread,
                "sources": [turn.id for turn in turns],
                "text": _summary(turns, weight),
            }
        )
    return items


def _summary(turns: Sequence[CorpusTurn], weight: dict[str, float]) -> str:
    ordered = sorted(turns, key=lambda turn: (turn.at, turn.id))
    speakers = list(dict.fromkeys(s for s in map(_speaker, ordered) if s))
    scored = sorted(
        range(len(ordered)),
        key=lambda i: -sum(weight.get(w, 0.0) for w in set(_words(_said(ordered[i])))),
    )
    chosen = sorted(scored[:SENTENCES])  # back in the session's order
    sentences = " ".join(_said(ordered[i])[:MAX_SENTENCE_CHARS] for i in chosen)
    top = sorted(weight, key=lambda w: (-weight[w], w))[:WORDS]
    between = f" between {', '.join(speakers)}" if speakers else ""
    return (
        f"Conversation on {ordered[0].at:%d %B %Y}{between}. {sentences} Topics: {', '.join(top)}."
    )


def _tf_idf(counts: Counter[str], documents: Sequence[Counter[str]]) -> dict[str, float]:
    total = sum(counts.values()) or 1
    return {
        word: count
        / total
        * math.log((1 + len(documents)) / (1 + sum(word in d for d in documents)))
        for word, count in counts.items()
    }


def _speaker(turn: CorpusTurn) -> str:
    name, colon, _ = turn.text.partition(":")
    return name.strip() if colon and 0 < len(name) <= 40 and " " not in name.strip() else ""


def _said(turn: CorpusTurn) -> str:
    """The turn's words without its speaker's name."""
    return turn.text.partition(":")[2].strip() if _speaker(turn) else turn.text


def _words(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if w not in STOPWORDS]
