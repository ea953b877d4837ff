"""``llm-bot eval retrieval``: how well recall finds the right older messages, per mode.

The corpus is loaded through the worker's own commit path (pairs written by
:class:`~llm_bot.memory.commit.MemoryCommit`, embedded by the configured provider) and every
query goes through the same :func:`~llm_bot.memory.recall.recall_turns` the worker uses, in
each mode (dense, lexical, hybrid). Reported: recall@k, MRR, latency, recall at the deeper
``DEPTHS`` context assembly asks for, the same per category
of question (a query's own ``category``, else one inferred by the rules of
:mod:`~llm_bot_tools.evaluation.categories`), and the similarity of relevant vs irrelevant hits with
a precision/recall table per threshold for calibration. Recall@k counts turns: a session
summary among the hits (:mod:`~llm_bot_tools.evaluation.derived`) takes a slot and is no
evidence turn itself; how many slots summaries took is reported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg import AsyncConnection

from llm_bot.db.hybrid import SearchMode
from llm_bot.memory.commit import MemoryCommit, Pair
from llm_bot.memory.recall import RecalledTurn, recall_turns
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.reads import stored_turns
from llm_bot.settings import Settings
from llm_bot.text import storable
from llm_bot_tools.evaluation.calibration import ThresholdRow, threshold_table
from llm_bot_tools.evaluation.categories import inferred_category
from llm_bot_tools.evaluation.jsonl import read_jsonl

if TYPE_CHECKING:
    from llm_bot_tools.evaluation.context import ContextReport

NEVER_IDLE = timedelta(days=36_500)
# recall@k is also reported at these depths: the candidate counts context assembly asks recall
# for when it fills the recall section's token budget, so the share of the evidence a budget
# could hold at best.
DEPTHS = (20, 40)
ASKED_AFTER = timedelta(minutes=1)  # a question follows its user's last turn


@dataclass(frozen=True)
class CorpusTurn:
    id: str
    user_id: str
    thread_id: str
    role: str
    text: str
    at: datetime


@dataclass(frozen=True)
class EvalQuery:
    id: str
    user_id: str
    query: str
    relevant: frozenset[str]
    category: str
    category_inferred: bool


@dataclass(frozen=True)
class CategoryReport:
    queries: int
    recall_at_k: float
    mrr: float
    inferred: bool  # by rules, not labelled in the queries file


@dataclass(frozen=True)
class ConversationReport:
    queries: int
    recall_at_k: float
    mrr: float


@dataclass(frozen=True)
class DepthReport:
    """recall at one depth, overall and per category, with its spread over conversations."""

    recall: float
    by_category: dict[str, float]
    conversation_spread: Spread


@dataclass(frozen=True)
class Spread:
    """The lowest and highest of a measure across conversations."""

    min: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        listed = list(values)
        return cls(min(listed), max(listed))


@dataclass(frozen=True)
class ModeReport:
    mode: str
    k: int
    queries: int
    recall_at_k: float
    mrr: float
    p50_ms: float
    p95_ms: float
    relevant_scores: list[float]
    irrelevant_scores: list[float]
    table: list[ThresholdRow]
    by_category: dict[str, CategoryReport]
    by_conversation: dict[str, ConversationReport]  # a conversation is a corpus user
    conversation_spread: Spread  # of recall@k
    recall_at_depth: dict[int, DepthReport]  # recall at each of DEPTHS
    summaries_at_k: float  # mean summaries among a query's k hits: slots no evidence turn holds

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _require(row: Mapping[str, Any], fields: Sequence[str]) -> None:
    missing = [name for name in fields if name not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")


def _text(row: Mapping[str, Any], field: str) -> str:
    """A string field as the worker would store it: a lone surrogate or a NUL, which no
    stored text can hold, replaced (:func:`~llm_bot.text.storable`)."""
    value = row[field]
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string")
    return storable(value)


def _turn(row: dict[str, Any]) -> CorpusTurn:
    _require(row, ("id", "user_id", "thread_id", "role", "text", "at"))
    if row["role"] not in ("user", "assistant"):
        raise ValueError(f"turn {row['id']}: role must be user or assistant")
    try:
        at = datetime.fromisoformat(str(row["at"]).replace("Z", "+00:00"))
    except ValueError:
        at = None
    if at is None or at.utcoffset() is None:
        raise ValueError(f"turn {row['id']}: at must be an ISO 8601 time with its UTC offset")
    return CorpusTurn(
        str(row["id"]),
        str(row["user_id"]),
        str(row["thread_id"]),
        row["role"],
        _text(row, "text"),
        at,
    )


def load_corpus(path: Path) -> list[CorpusTurn]:
    turns = read_jsonl(path, _turn)
    seen: set[str] = set()
    for turn in turns:
        if turn.id in seen:
            raise ValueError(f"{path}: turn id {turn.id} appears twice")
        seen.add(turn.id)
    return turns


def _query(row: dict[str, Any]) -> EvalQuery:
    _require(row, ("id", "user_id", "query", "relevant"))
    listed = row["relevant"]
    if not isinstance(listed, list) or not listed:
        # A query without evidence has no recall to measure (its recall@k would divide by 0).
        raise ValueError(f"query {row['id']}: relevant must be a non-empty list of turn ids")
    relevant = frozenset(map(str, listed))
    labelled = row.get("category")
    query = _text(row, "query")
    category = str(labelled) if labelled else inferred_category(query, len(relevant))
    return EvalQuery(
        str(row["id"]),
        str(row["user_id"]),
        query,
        relevant,
        category,
        category_inferred=not labelled,
    )


def load_queries(path: Path) -> list[EvalQuery]:
    """Queries with their evidence; ``category`` is optional (inferred when missing)."""
    return read_jsonl(path, _query)


def pairs_of(corpus: Sequence[CorpusTurn]) -> list[tuple[CorpusTurn, CorpusTurn]]:
    """Each user turn with the assistant turn after it in its thread (time order)."""
    pairs = []
    by_thread: dict[str, list[CorpusTurn]] = {}
    for turn in sorted(corpus, key=lambda t: (t.at, t.id)):
        by_thread.setdefault(turn.thread_id, []).append(turn)
    for thread, turns in by_thread.items():
        for user, assistant in zip(turns[::2], turns[1::2], strict=False):
            if (user.role, assistant.role) != ("user", "assistant"):
                raise ValueError(
                    f"thread {thread}: turns must alternate user, assistant ({user.id})"
                )
            pairs.append((user, assistant))
        if len(turns) % 2:
            raise ValueError(f"thread {thread}: the last user turn has no reply ({turns[-1].id})")
    return pairs


def latest_threads(corpus: Iterable[CorpusTurn]) -> dict[str, tuple[str, datetime]]:
    """Each user's most recent thread and the time of its last turn: every query of a user is
    asked ``ASKED_AFTER`` later, in that thread (its relative dates are read from then)."""
    latest: dict[str, CorpusTurn] = {}
    for turn in corpus:
        seen = latest.get(turn.user_id)
        if seen is None or (turn.at, turn.id) > (seen.at, seen.id):
            latest[turn.user_id] = turn
    return {user: (turn.thread_id, turn.at) for user, turn in latest.items()}


def asking_times(corpus: Iterable[CorpusTurn], queries: Iterable[EvalQuery]) -> dict[str, datetime]:
    """When each user's queries are asked: ``ASKED_AFTER`` their last turn. ValueError for a
    query whose user has no turn in the corpus (nothing to ask in, nothing to recall)."""
    asked = {user: at + ASKED_AFTER for user, (_, at) in latest_threads(corpus).items()}
    for query in queries:
        if query.user_id not in asked:
            raise ValueError(f"query {query.id}: user {query.user_id!r} has no turn in the corpus")
    return asked


async def load_through_commit(
    store: MemoryStore,
    corpus: Sequence[CorpusTurn],
    progress: Callable[[str], None],
    settings: Settings,
) -> dict[tuple[str, int], str]:
    """Write the corpus as the worker writes turns; map (thread, seq) back to corpus ids."""
    commit = MemoryCommit(
        store,
        "eval",
        NEVER_IDLE,
        max_chars=settings.history_max_chars,
        notes_max_chars=settings.notes_max_chars,
        window_pairs=settings.context_pairs,
    )
    pairs = pairs_of(corpus)
    for done, (user, assistant) in enumerate(pairs, start=1):
        pair = Pair(user.id, user.thread_id, user.user_id, user.text, assistant.text, user.at, None)
        await commit.commit_now(pair)
        if done % 50 == 0 or done == len(pairs):
            progress(f"loaded {done}/{len(pairs)} pairs")
    reply_of = {user.id: assistant.id for user, assistant in pairs}
    async with store.connection() as connection:
        turns = await stored_turns(connection)
    return {
        (turn.thread_id, turn.seq): (
            turn.source_event if turn.role == "user" else reply_of[turn.source_event]
        )
        for turn in turns
    }


async def evaluate_mode(
    store: MemoryStore,
    queries: Sequence[EvalQuery],
    ids: dict[tuple[str, int], str],
    mode: SearchMode,
    k: int,
    asked: Mapping[str, datetime],
) -> ModeReport:
    """recall@k, MRR and latency of ``mode``, each query asked at its user's time in
    ``asked`` (:func:`latest_threads`)."""
    recalls, reciprocal_ranks, timings = [], [], []
    deep: dict[int, list[float]] = {depth: [] for depth in DEPTHS}
    scored: list[tuple[float, bool]] = []
    summaries = 0
    for query in queries:
        vector = (await store.embedder.embed([query.query]))[0]
        async with store.connection() as connection:
            began = time.perf_counter()
            at = asked[query.user_id]
            hits = await _recalled(connection, query, vector, mode, k, at)
            timings.append((time.perf_counter() - began) * 1000)
            deepest = await _recalled(connection, query, vector, mode, max(DEPTHS), at)
        found = [ids.get((hit.thread_id, hit.seq)) for hit in hits]  # None: a summary
        summaries += sum(hit.role == "summary" for hit in hits)
        recalls.append(_share(query, found))
        for depth in DEPTHS:
            deep[depth].append(
                _share(query, [ids.get((h.thread_id, h.seq)) for h in deepest[:depth]])
            )
        first = next((rank for rank, hit_id in enumerate(found, 1) if hit_id in query.relevant), 0)
        reciprocal_ranks.append(1 / first if first else 0.0)
        scored += [
            (hit.similarity, hit_id in query.relevant)
            for hit, hit_id in zip(hits, found, strict=True)
        ]
    cuts = statistics.quantiles(timings, n=20) if len(timings) > 1 else timings * 19
    by_conversation = _by_conversation(queries, recalls, reciprocal_ranks)
    return ModeReport(
        mode=mode,
        k=k,
        queries=len(queries),
        recall_at_k=round(statistics.mean(recalls), 3),
        mrr=round(statistics.mean(reciprocal_ranks), 3),
        p50_ms=round(statistics.median(timings), 2),
        p95_ms=round(cuts[18], 2),
        relevant_scores=sorted(round(s, 4) for s, relevant in scored if relevant),
        irrelevant_scores=sorted(round(s, 4) for s, relevant in scored if not relevant),
        table=threshold_table(scored),
        by_category=_by_category(queries, recalls, reciprocal_ranks),
        by_conversation=by_conversation,
        conversation_spread=Spread.of(c.recall_at_k for c in by_conversation.values()),
        recall_at_depth={depth: _at_depth(queries, deep[depth]) for depth in DEPTHS},
        summaries_at_k=round(summaries / len(queries), 3),
    )


async def _recalled(
    connection: AsyncConnection[Any],
    query: EvalQuery,
    vector: list[float],
    mode: SearchMode,
    limit: int,
    asked_at: datetime,
) -> list[RecalledTurn]:
    """The query's ``limit`` best turns, every one whatever its similarity."""
    return await recall_turns(
        connection,
        query.user_id,
        query.query,
        vector,
        exclude=(),
        limit=limit,
        threshold=-1.0,
        mode=mode,
        asked_at=asked_at,
    )


def _share(query: EvalQuery, found: Sequence[str | None]) -> float:
    """The share of the query's evidence among ``found`` (a summary, ``None``, is no
    evidence turn)."""
    return len(query.relevant & set(found)) / len(query.relevant)


def _at_depth(queries: Sequence[EvalQuery], recalls: Sequence[float]) -> DepthReport:
    by_conversation = _by_conversation(queries, recalls, recalls)
    return DepthReport(
        recall=round(statistics.mean(recalls), 3),
        by_category={
            name: c.recall_at_k for name, c in _by_category(queries, recalls, recalls).items()
        },
        conversation_spread=Spread.of(c.recall_at_k for c in by_conversation.values()),
    )


def _by_category(
    queries: Sequence[EvalQuery], recalls: Sequence[float], reciprocal_ranks: Sequence[float]
) -> dict[str, CategoryReport]:
    groups: dict[str, list[int]] = {}
    for index, query in enumerate(queries):
        groups.setdefault(query.category, []).append(index)
    return {
        category: CategoryReport(
            queries=len(members),
            recall_at_k=round(statistics.mean(recalls[i] for i in members), 3),
            mrr=round(statistics.mean(reciprocal_ranks[i] for i in members), 3),
            inferred=any(queries[i].category_inferred for i in members),
        )
        for category, members in sorted(groups.items())
    }


def _by_conversation(
    queries: Sequence[EvalQuery], recalls: Sequence[float], reciprocal_ranks: Sequence[float]
) -> dict[str, ConversationReport]:
    groups: dict[str, list[int]] = {}
    for index, query in enumerate(queries):
        groups.setdefault(query.user_id, []).append(index)
    return {
        user: ConversationReport(
            queries=len(members),
            recall_at_k=round(statistics.mean(recalls[i] for i in members), 3),
            mrr=round(statistics.mean(reciprocal_ranks[i] for i in members), 3),
        )
        for user, members in sorted(groups.items())
    }


def plot_reports(
    reports: Sequence[ModeReport], path: Path, given: ContextReport | None = None
) -> None:
    """Recall quality per mode, what the model is given (when measured), the hit scores."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 3 if given else 2
    widths = [1, 3, 1.4] if given else [1, 1]
    figure, axes = plt.subplots(
        1, panels, figsize=(6 * panels, 4), gridspec_kw={"width_ratios": widths}
    )
    quality, scores = axes[0], axes[-1]
    positions = range(len(reports))
    quality.bar(
        [p - 0.2 for p in positions], [r.recall_at_k for r in reports], 0.4, label="recall@k"
    )
    quality.bar([p + 0.2 for p in positions], [r.mrr for r in reports], 0.4, label="MRR")
    quality.set_xticks(list(positions), [r.mode for r in reports])
    quality.set_ylim(0, 1)
    quality.set_title(f"Recall quality (k = {reports[0].k if reports else 0})")
    quality.legend()
    hybrid = next((r for r in reports if r.mode == "hybrid"), reports[-1])
    if given:
        _plot_given(axes[1], hybrid, given)
    bins = [x / 20 for x in range(-4, 21)]
    scores.hist(hybrid.irrelevant_scores, bins=bins, alpha=0.6, label="irrelevant", density=True)
    scores.hist(hybrid.relevant_scores, bins=bins, alpha=0.6, label="relevant", density=True)
    scores.set_xlabel("cosine similarity of hits")
    scores.set_title(f"Scores of {hybrid.mode} hits")
    scores.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _plot_given(axis: Any, hybrid: ModeReport, given: ContextReport) -> None:
    """Evidence in the assembled context beside recall@k, overall, per category and per
    conversation."""
    groups = [("all", given.overall.evidence_in_context, hybrid.recall_at_k)]
    groups += [
        (name, score.evidence_in_context, hybrid.by_category[name].recall_at_k)
        for name, score in given.by_category.items()
    ]
    groups += [
        (name, score.evidence_in_context, hybrid.by_conversation[name].recall_at_k)
        for name, score in given.by_conversation.items()
    ]
    positions = range(len(groups))
    axis.bar(
        [p - 0.2 for p in positions],
        [g[1] for g in groups],
        0.4,
        label=f"evidence in context (recall budget {given.recall_budget_tokens} tokens + window)",
    )
    axis.bar(
        [p + 0.2 for p in positions],
        [g[2] for g in groups],
        0.4,
        label=f"{hybrid.mode} recall@{hybrid.k}",
    )
    axis.axvline(len(given.by_category) + 0.5, color="grey", linewidth=0.8)
    axis.set_xticks(list(positions), [g[0] for g in groups], rotation=30, ha="right")
    axis.set_ylim(0, 1.15)  # room for the legend above the bars
    axis.set_title(
        "What the model is given: per category, then per conversation"
        f" (recall section p50 {given.recall_tokens_p50:g} tokens)"
    )
    axis.legend(loc="upper left", ncols=2)
