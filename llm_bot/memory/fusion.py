"""How recall turns a dense and a lexical score per turn into one ranking.

Measured on the development half of LoCoMo (docs/eval-retrieval.md), each step for a reason
that does not depend on that data set:

- **Scores, not ranks, are fused.** Reciprocal-rank fusion (k = 60) over forty candidates a
  side gives the tenth candidate almost the weight of the first, and ignores how far ahead a
  clear winner is. Each side is divided by its best score among the candidates (a cosine and a
  BM25 score are on different scales; the best one of the query is the natural unit), and the
  two are averaged with equal weights: no weight is fitted to the evaluation set.
- **A turn is read with its neighbours.** In a conversation the words of a question and of its
  answer sit in adjacent turns ("where did you go?" / "Lisbon, with my sister"), so the turn
  that matches is often next to the one that holds the fact. Each turn's score is raised by
  half the best score among the turns up to ``NEIGHBOUR_REACH`` places away in its thread.
- **A session's summary is read with its turns.** A summary (written by memory consolidation)
  names what a session was about in words its turns may not share with the question; the turns
  it covers gain from it as from a neighbour, so the summary brings the session's best-matching
  turns (``SUMMARY_EXPANSION``, fetched with it) into the ranking, and the turns carry the
  evidence with their own dates.
- **A corrected statement and its correction trade places.** When consolidation replaced a
  derived memory's text (a correction: the phone number changed, the wedding moved), the turns
  only its earlier text cited are outdated, and the later turns its current text cites are
  what holds the fact now. On each side, those turns take the outdated turn's score where it
  is better than their own, and the outdated turn keeps its own only up to theirs: the newer
  statement ranks where the older one did, and the older no higher than the newer would have
  by itself (so a turn that also says what was not corrected, and says it as well as the
  correction, stays near it). Read from what consolidation recorded, never from the words: a
  later turn close in meaning to an earlier one adds to it more often than it replaces it
  (docs/eval-retrieval.md). The reply in a corrected turn's pair (the assistant's "noted,
  your manager is Ana") is as outdated as the turn, and trades places with the replies in the
  correcting turns' pairs in the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

NEIGHBOUR_REACH = 2  # turns either side: the exchange before and after a turn
NEIGHBOUR_WEIGHT = 0.5
DENSE_WEIGHT = 0.5
SUMMARY_EXPANSION = 3  # turns a recalled summary brings: a question's evidence in one session

Key = tuple[str, int]


def with_neighbours(
    scores: Mapping[Key, float],
    covering: Mapping[Key, Sequence[Key]] | None = None,
    reach: int = NEIGHBOUR_REACH,
) -> dict[Key, float]:
    """Each (thread, seq) score plus ``NEIGHBOUR_WEIGHT`` times the best score among the turns
    within ``reach`` of it in the same thread and the summaries ``covering`` it (only keys
    present in ``scores`` count). A summary (seq < 0) has no neighbours: the seqs beside its
    own are other summaries'. A loop without lists per turn: recall smooths both sides of some
    600 candidates an event, and a list of neighbours per turn costs ~6 µs a turn."""
    covering = covering or {}
    steps = [step for step in range(-reach, reach + 1) if step != 0]
    score_of = scores.get
    smoothed = {}
    for key, own in scores.items():
        thread, seq = key
        best = 0.0
        for summary in covering.get(key, ()):
            if (score := score_of(summary, 0.0)) > best:
                best = score
        if seq > 0:
            for step in steps:
                if (score := score_of((thread, seq + step), 0.0)) > best:
                    best = score
        smoothed[key] = own + NEIGHBOUR_WEIGHT * best
    return smoothed


def replaced(
    replaced_by: Mapping[Key, Sequence[Key]], written: Mapping[Key, datetime]
) -> dict[Key, list[Key]]:
    """The outdated turns among the candidates ``written`` (their times), each with the turns
    that replace it: of those ``replaced_by`` names, the candidates written after it. A turn
    none of whose replacements is a later candidate (not visible to the caller, or an earlier
    turn, as when an older window was consolidated after a newer one) is left as it is."""
    outdated = {}
    for old, newer in replaced_by.items():
        at = written.get(old)
        later = [key for key in newer if at is not None and key in written and written[key] > at]
        if later:
            outdated[old] = later
    return outdated


def with_pairs(
    outdated: Mapping[Key, Sequence[Key]], partner: Mapping[Key, Key]
) -> dict[Key, list[Key]]:
    """``outdated`` with the other turn of each outdated turn's pair (``partner``: the
    user's turn and the reply to it) replaced by the other turns of the replacing turns'
    pairs. A partner already outdated in its own right, or replacing, is left as it is."""
    extended = {old: list(newer) for old, newer in outdated.items()}
    replacing = {key for newer in outdated.values() for key in newer}
    for old, newer in outdated.items():
        mate = partner.get(old)
        if mate is None or mate in outdated or mate in replacing:
            continue
        mates = [partner[key] for key in newer if key in partner and partner[key] != mate]
        if mates:
            extended[mate] = mates
    return extended


def corrected(
    scores: Mapping[Key, float], outdated: Mapping[Key, Sequence[Key]]
) -> dict[Key, float]:
    """``scores`` with each outdated turn and the turns that replace it trading places: each of
    those takes the outdated turn's score when it is better than its own, and the outdated turn
    keeps its own only up to the lowest of theirs (their own scores, before they took any)."""
    if not outdated:
        return dict(scores)
    taken: dict[Key, float] = {}
    capped: dict[Key, float] = {}
    for old, newer in outdated.items():
        for key in newer:
            taken[key] = max(taken.get(key, scores[old]), scores[old])
        capped[old] = min(scores[key] for key in newer)
    return {
        key: min(score, capped[key]) if key in capped else max(score, taken.get(key, score))
        for key, score in scores.items()
    }


def summaries_covering(
    spans: Mapping[Key, tuple[int, int]], keys: Iterable[Key]
) -> dict[Key, list[Key]]:
    """For each of ``keys``, the summaries whose span ``(after, last]`` (by summary key) holds
    it in its thread."""
    if not spans:
        return {}
    by_thread: dict[str, list[tuple[Key, int, int]]] = {}
    for summary, (after, last) in spans.items():
        by_thread.setdefault(summary[0], []).append((summary, after, last))
    covering: dict[Key, list[Key]] = {}
    for thread, seq in keys:
        for summary, after, last in by_thread.get(thread, ()):
            if after < seq <= last:
                covering.setdefault((thread, seq), []).append(summary)
    return covering


def fused(
    dense: Mapping[K, float], lexical: Mapping[K, float], *, use_dense: bool, use_lexical: bool
) -> dict[K, float]:
    """One score per candidate: each side divided by its best, averaged. A side that is off
    (its mode) or has no positive score contributes nothing."""
    dense_weight = DENSE_WEIGHT if use_dense else 0.0
    lexical_weight = 1 - DENSE_WEIGHT if use_lexical else 0.0
    total = dense_weight + lexical_weight
    dense_best = _best(dense) if use_dense else 0.0
    lexical_best = _best(lexical) if use_lexical else 0.0
    dense_of, lexical_of = dense.get, lexical.get
    fused_scores = {}
    for key in dense.keys() | lexical.keys():
        dense_part = dense_weight * (dense_of(key, 0.0) / dense_best if dense_best > 0 else 0.0)
        lexical_part = lexical_weight * (
            lexical_of(key, 0.0) / lexical_best if lexical_best > 0 else 0.0
        )
        fused_scores[key] = (dense_part + lexical_part) / total
    return fused_scores


def _best(scores: Mapping[K, float]) -> float:
    return max(scores.values(), default=0.0)


def ranks(
    scores: Mapping[tuple[str, int], float], *, scored: Callable[[float], bool] = lambda _: True
) -> dict[tuple[str, int], int]:
    """Each (thread, seq)'s place by its score, 1 the best, ties by key, over the keys whose
    score is ``scored`` (a BM25 of 0 is no match, so no place on the lexical side)."""
    ordered = sorted(
        (key for key, score in scores.items() if scored(score)), key=lambda key: (-scores[key], key)
    )
    return {key: place for place, key in enumerate(ordered, start=1)}
