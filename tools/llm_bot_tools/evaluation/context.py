"""What the model is given: evidence turns in the context the worker assembles.

For each query the worker's own retriever (:class:`~llm_bot.memory.context.PostgresMemoryRetriever`,
what the ``retrieve_memories`` node calls) assembles the memory context at the worker's
settings, as the user who owns the conversation, asking in their most recent thread a minute
after its last turn (so that thread's current session is the window). An evidence turn counts
when it is in the prompt: among the turns the recall section gives (the context's ``recalled``,
each shown as a line of that section) or as a message of the window (a turn of the thread asked
in, its words as the window shows them), or cited by a memory of the memories section (a derived
fact's ``derivedFrom`` thread and ``sourceTurns``, as consolidation writes them). A session
summary shown in the recall section gives no turn: it is counted, with its tokens, so its share
of the recall budget is visible. Reported: the share of a query's evidence so placed, overall,
per category and per conversation (a corpus user), and the recall section's size in tokens.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from llm_bot.events.identity import is_shared_thread
from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.budget import cited_turns
from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
from llm_bot.memory.recall import RecalledTurn
from llm_bot.memory.rendering import attributed, recall_line
from llm_bot.memory.search import MemoryHit
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.reads import StoredTurn
from llm_bot.memory.turns.reads import stored_turns as all_stored_turns
from llm_bot.memory.validation import approx_tokens
from llm_bot.settings import Settings
from llm_bot_tools.evaluation.retrieval import (
    ASKED_AFTER,
    CorpusTurn,
    EvalQuery,
    Spread,
    latest_threads,
)


@dataclass(frozen=True)
class Shown:
    """Where a query's evidence turns ended up in the prompt."""

    evidence: int
    in_context: int  # in the recall section or the window
    in_recall: int
    in_window: int
    recall_tokens: int
    in_memories: int = 0  # cited by a fact of the memories section
    summaries: int = 0  # session summaries in the recall section
    summary_tokens: int = 0  # their lines' tokens
    memory_tokens: int = 0  # the memories section's


@dataclass(frozen=True)
class ContextScore:
    queries: int
    evidence_in_context: float  # mean share of a query's evidence turns in the prompt
    in_recall: float  # ... in the recall section
    in_window: float  # ... in the thread's window
    in_memories: float  # ... cited by a fact of the memories section
    summaries_shown: float  # mean summaries in the recall section
    summary_share: float  # their share of the recall section's tokens


@dataclass(frozen=True)
class ContextReport:
    recall_budget_tokens: int  # MEMORY_RECALL_BUDGET
    context_pairs: int  # CONTEXT_PAIRS
    max_context_tokens: int  # MAX_CONTEXT_TOKENS
    memory_budget_tokens: int  # MEMORY_INJECTION_BUDGET
    threshold: float
    overall: ContextScore
    evidence_not_in_corpus: int  # evidence ids of the queries no corpus turn has: never given
    recall_tokens_p50: float
    recall_tokens_p95: float
    # The memories section's, which shares the prompt with the recall section.
    memory_tokens_p50: float
    memory_tokens_p95: float
    by_category: dict[str, ContextScore]
    by_conversation: dict[str, ContextScore]
    conversation_spread: Spread

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def shown(
    messages: Sequence[ChatMessage],
    recalled: Sequence[RecalledTurn],
    stats: dict[str, int],
    evidence: Sequence[StoredTurn | None],
    thread_id: str,
    memories: Sequence[MemoryHit] = (),
) -> Shown:
    """Which of ``evidence`` the assembled context holds, asked in ``thread_id``: the
    ``recalled`` turns, the window's ``messages`` and the turns the shown ``memories`` cite;
    ``None`` is an evidence id the corpus lacks, never given (as recall@k counts it)."""
    given = {(turn.thread_id, turn.seq) for turn in recalled if turn.role != "summary"}
    window = {message.content for message in messages if message.role != "system"}
    cited = cited_turns(memories)
    in_recall = [turn is not None and (turn.thread_id, turn.seq) in given for turn in evidence]
    windowed = [
        turn is not None
        and turn.thread_id == thread_id
        and bool({turn.content, attributed(turn.user_id, turn.content)} & window)
        for turn in evidence
    ]
    in_memories = [turn is not None and (turn.thread_id, turn.seq) in cited for turn in evidence]
    summaries = [turn for turn in recalled if turn.role == "summary"]
    return Shown(
        evidence=len(evidence),
        in_context=sum(map(any, zip(in_recall, windowed, in_memories, strict=True))),
        in_recall=sum(in_recall),
        in_window=sum(windowed),
        recall_tokens=stats.get("recallTokens", 0),
        in_memories=sum(in_memories),
        summaries=len(summaries),
        summary_tokens=sum(approx_tokens(recall_line(turn)) for turn in summaries),
        memory_tokens=stats.get("memoriesTokens", 0),
    )


async def stored_turns(
    store: MemoryStore, ids: dict[tuple[str, int], str]
) -> dict[str, StoredTurn]:
    """Every stored turn by its corpus id."""
    async with store.connection() as connection:
        turns = await all_stored_turns(connection)
    return {ids[(turn.thread_id, turn.seq)]: turn for turn in turns}


async def evaluate_context(
    store: MemoryStore,
    corpus: Sequence[CorpusTurn],
    queries: Sequence[EvalQuery],
    ids: dict[tuple[str, int], str],
    settings: Settings,
    progress: Callable[[str], None],
) -> ContextReport:
    limits = ContextLimits.from_settings(settings)
    turns = await stored_turns(store, ids)
    latest = latest_threads(corpus)
    retrievers = {
        user: PostgresMemoryRetriever(store, limits, settings.agent_name, _at(at + ASKED_AFTER))
        for user, (_, at) in latest.items()
    }
    results = []
    not_in_corpus = 0
    for done, query in enumerate(queries, start=1):
        thread_id = latest[query.user_id][0]
        context = await retrievers[query.user_id].retrieve(
            query.user_id, thread_id, query.query, private=not is_shared_thread(thread_id)
        )
        evidence = [turns.get(turn_id) for turn_id in sorted(query.relevant)]
        not_in_corpus += evidence.count(None)
        results.append(
            shown(
                context.messages,
                context.recalled,
                context.stats,
                evidence,
                thread_id,
                context.memories,
            )
        )
        if done % 100 == 0 or done == len(queries):
            progress(f"assembled the context of {done}/{len(queries)} queries")
    return context_report(queries, results, limits, not_in_corpus)


def _at(moment: datetime) -> Callable[[], datetime]:
    """A clock stopped at ``moment``."""
    return lambda: moment


def context_report(
    queries: Sequence[EvalQuery],
    results: Sequence[Shown],
    limits: ContextLimits,
    not_in_corpus: int = 0,
) -> ContextReport:
    recall_p50, recall_p95 = _p50_p95([result.recall_tokens for result in results])
    memory_p50, memory_p95 = _p50_p95([result.memory_tokens for result in results])
    by_conversation = _grouped(queries, results, lambda query: query.user_id)
    values = [score.evidence_in_context for score in by_conversation.values()]
    return ContextReport(
        recall_budget_tokens=limits.recall_budget_tokens,
        context_pairs=limits.context_pairs,
        max_context_tokens=limits.max_context_tokens,
        memory_budget_tokens=limits.memory_budget_tokens,
        threshold=limits.threshold,
        overall=score(results),
        evidence_not_in_corpus=not_in_corpus,
        recall_tokens_p50=recall_p50,
        recall_tokens_p95=recall_p95,
        memory_tokens_p50=memory_p50,
        memory_tokens_p95=memory_p95,
        by_category=_grouped(queries, results, lambda query: query.category),
        by_conversation=by_conversation,
        conversation_spread=Spread.of(values),
    )


def _p50_p95(tokens: list[int]) -> tuple[float, float]:
    cuts = statistics.quantiles(tokens, n=20) if len(tokens) > 1 else tokens * 19
    return statistics.median(tokens), round(cuts[18], 1)


def score(results: Sequence[Shown]) -> ContextScore:
    def share(count: Callable[[Shown], int]) -> float:
        return round(statistics.mean(count(r) / r.evidence for r in results), 3)

    recall_tokens = sum(r.recall_tokens for r in results)
    return ContextScore(
        queries=len(results),
        evidence_in_context=share(lambda r: r.in_context),
        in_recall=share(lambda r: r.in_recall),
        in_window=share(lambda r: r.in_window),
        in_memories=share(lambda r: r.in_memories),
        summaries_shown=round(statistics.fmean(r.summaries for r in results), 3),
        summary_share=round(sum(r.summary_tokens for r in results) / (recall_tokens or 1), 3),
    )


def _grouped(
    queries: Sequence[EvalQuery], results: Sequence[Shown], key: Callable[[EvalQuery], str]
) -> dict[str, ContextScore]:
    groups: dict[str, list[Shown]] = {}
    for query, result in zip(queries, results, strict=True):
        groups.setdefault(key(query), []).append(result)
    return {name: score(members) for name, members in sorted(groups.items())}


def plot_budgets(
    budgets: Sequence[ContextReport], path: Path, derived: Sequence[ContextReport] = ()
) -> None:
    """Evidence in context against the tokens the memories and the recall section took (their
    medians), overall and per category, and with ``derived`` the same with the derived items
    (overall): where another hundred tokens stops buying evidence, and what a model's facts
    and summaries are worth at equal tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def tokens(reports: Sequence[ContextReport]) -> list[float]:
        return [r.memory_tokens_p50 + r.recall_tokens_p50 for r in reports]

    figure, axis = plt.subplots(figsize=(7, 4.5))
    x = tokens(budgets)
    label = "all, without derived items" if derived else "all"
    axis.plot(x, [b.overall.evidence_in_context for b in budgets], marker="o", label=label)
    for category in budgets[0].by_category:
        y = [b.by_category[category].evidence_in_context for b in budgets]
        axis.plot(x, y, marker=".", linestyle="--", label=category)
    if derived:
        y = [d.overall.evidence_in_context for d in derived]
        axis.plot(tokens(derived), y, marker="s", color="black", label="all, with derived items")
    axis.set_xlabel("memories + recall section (tokens, median)")
    axis.set_ylabel("evidence in context")
    axis.set_ylim(0, 1)
    axis.set_title("What the model is given against its tokens")
    axis.legend(loc="lower right")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
