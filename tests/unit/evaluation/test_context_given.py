"""Counting which evidence turns the assembled context holds, and the report over queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from llm_bot.llm.messages import ChatMessage
from llm_bot.memory.budget import select_recalled
from llm_bot.memory.context import ContextLimits
from llm_bot.memory.recall import RecalledTurn
from llm_bot.memory.rendering import attributed
from llm_bot.memory.search import MemoryHit
from llm_bot.memory.turns.reads import StoredTurn
from llm_bot_tools.evaluation.context import Shown, context_report, shown
from llm_bot_tools.evaluation.retrieval import CorpusTurn, EvalQuery, latest_threads

AT = datetime(2026, 10, 1, 10, 0, tzinfo=UTC)


def turn(thread: str, seq: int, role: str, content: str, minutes: int = 0) -> StoredTurn:
    at = AT + timedelta(minutes=minutes)
    return StoredTurn(thread, seq, "kim", role, content, at, "public", f"{thread}-{seq}")


def given(*turns: StoredTurn) -> tuple[list[ChatMessage], list[RecalledTurn]]:
    """The recall section of ``turns`` as context assembly gives it, and the turns."""
    recalled = [
        RecalledTurn(t.thread_id, t.seq, t.role, t.content, t.created_at, 0.5, 0.5) for t in turns
    ]
    selection = select_recalled(recalled, 10_000)
    return [ChatMessage("user", selection.text)], selection.turns


def test_evidence_counts_in_the_recall_section_or_the_thread_window_and_unknown_ids_never() -> None:
    recalled = turn("chat:old", 1, "user", "My sister lives in Lisbon")
    in_window = turn("chat:new", 3, "user", "I bought a red bicycle", minutes=5)
    reply_in_window = turn("chat:new", 4, "assistant", "Enjoy it!", minutes=6)
    missing = turn("chat:old", 7, "user", "We met in Porto", minutes=1)
    same_words_elsewhere = turn("chat:other", 1, "assistant", "Enjoy it!", minutes=2)
    section, turns = given(recalled)
    messages = [
        ChatMessage("system", "notes"),
        *section,
        ChatMessage("user", attributed("kim", in_window.content)),
        ChatMessage("assistant", reply_in_window.content),
    ]
    evidence = [recalled, in_window, reply_in_window, missing, same_words_elsewhere, None]
    result = shown(messages, turns, {"recallTokens": 40}, evidence, "chat:new")
    assert result == Shown(evidence=6, in_context=3, in_recall=1, in_window=2, recall_tokens=40)


def test_a_recalled_turn_counts_for_itself_not_for_the_same_words_said_again() -> None:
    said_twice = turn("chat:old", 1, "user", "Bye!")
    later = turn("chat:old", 9, "user", "Bye!", minutes=90)
    section, turns = given(said_twice)
    result = shown(section, turns, {}, [later], "chat:new")
    assert (result.in_context, result.recall_tokens) == (0, 0)


def test_a_shown_fact_gives_the_turns_it_cites_and_a_shown_summary_gives_none() -> None:
    """A derived fact names its sources (consolidation's metadata), so the turns it stands for
    are in the prompt; a summary is counted with its tokens, never as the turns it covers."""
    cited = turn("chat:old", 3, "user", "I drive an old Volvo")
    covered = turn("chat:old", 1, "user", "We booked the trip to Kyoto")
    summary = turn("chat:old", -4, "summary", "Kim booked a trip to Kyoto")
    section, turns = given(summary)
    fact = MemoryHit(
        "car",
        "Kim drives an old Volvo",
        {"derivedFrom": "chat:old", "window": "2-3", "sourceTurns": "3", "observedAt": "x"},
        AT,
        AT,
        0.5,
        0.5,
    )
    saved = MemoryHit("tea", "Kim likes tea", {}, AT, AT, 0.5, 0.5)
    result = shown(
        section, turns, {"recallTokens": 20}, [cited, covered], "chat:new", [fact, saved]
    )
    assert (result.in_context, result.in_memories, result.in_recall) == (1, 1, 0)
    assert result.summaries == 1
    assert 0 < result.summary_tokens <= 20


def test_the_latest_thread_is_the_one_with_the_users_last_turn() -> None:
    corpus = [
        CorpusTurn("a1", "kim", "chat:a", "user", "x", AT + timedelta(days=2)),
        CorpusTurn("b1", "kim", "chat:b", "user", "x", AT + timedelta(days=1)),
        CorpusTurn("c1", "lou", "chat:c", "user", "x", AT),
    ]
    assert latest_threads(corpus) == {
        "kim": ("chat:a", AT + timedelta(days=2)),
        "lou": ("chat:c", AT),
    }


def test_the_report_splits_by_category_and_conversation_with_the_spread() -> None:
    queries = [
        EvalQuery("q1", "kim", "?", frozenset({"a", "b"}), "multi-hop", True),
        EvalQuery("q2", "kim", "?", frozenset({"c"}), "single-hop", True),
        EvalQuery("q3", "lou", "?", frozenset({"d"}), "single-hop", True),
    ]
    results = [
        Shown(evidence=2, in_context=1, in_recall=1, in_window=0, recall_tokens=100),
        Shown(evidence=1, in_context=1, in_recall=0, in_window=1, recall_tokens=0),
        Shown(
            evidence=1,
            in_context=0,
            in_recall=0,
            in_window=0,
            recall_tokens=50,
            summaries=2,
            summary_tokens=30,
        ),
    ]
    limits = ContextLimits(8000, 1000, 15, 1200, 0.2, timedelta(hours=6), private_in_public=False)
    report = context_report(queries, results, limits, not_in_corpus=1)
    assert report.overall.evidence_in_context == round((0.5 + 1 + 0) / 3, 3)
    assert report.by_category["multi-hop"].evidence_in_context == 0.5
    assert report.by_category["single-hop"].in_window == 0.5
    assert report.by_conversation["kim"].evidence_in_context == 0.75
    assert report.by_conversation["lou"].evidence_in_context == 0.0
    assert (report.conversation_spread.min, report.conversation_spread.max) == (0.0, 0.75)
    assert report.recall_tokens_p50 == 50
    assert report.recall_budget_tokens == 1200
    assert report.evidence_not_in_corpus == 1
    assert report.overall.summaries_shown == round(2 / 3, 3)
    assert report.overall.summary_share == 0.2  # 30 of the 150 recall tokens
