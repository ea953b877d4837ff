"""`llm-bot maintain`'s rules on a real database, with the clock set by the test: expired rows
go (tool calls with their event records), recent rows stay, a live claim is never touched, and
two runs at once split the work without failing or counting a row twice."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import AsyncConnection

from llm_bot.lifecycle.retention import RetentionPolicy, maintain

pytestmark = pytest.mark.integration

# The test's clock; a live lease is judged by the real clock too, so NOW is not in its future
# (a lease that ended "30 days ago" must have ended for real).
NOW = datetime.now(UTC)
POLICY = RetentionPolicy(
    processed_events_days=7,
    history_days=365,
    history_turns_per_thread=10,
    memories_per_user=3,
    batch_rows=7,
)


def days_ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def fill(url: str, copies: int) -> None:
    """``copies`` of each case: what must go and what must stay, by the policy above."""
    with psycopg.connect(url) as db:
        for n in range(copies):
            events = [  # (step, claimed, published, lease until; None = live lease)
                ("published-old", days_ago(9), days_ago(8), days_ago(9)),
                ("published-recent", days_ago(9), days_ago(2), days_ago(9)),
                ("abandoned-old", days_ago(30), None, days_ago(30)),
                ("live-claim", days_ago(30), None, None),
            ]
            for step, claimed, published, lease in events:
                db.execute(
                    "INSERT INTO processed_events (user_id, correlation_id, step_key,"
                    " lease_until, claimed_at, published, published_at, outcome, output_data)"
                    " VALUES ('u', %s, %s, coalesce(%s, clock_timestamp() + interval '1 hour'),"
                    " %s, %s, %s, 'OK', 'x')",
                    (f"c{n}", step, lease, claimed, published is not None, published),
                )
            # The explanations of the published events, stored when they were.
            for step, _, published, _ in events[:2]:
                db.execute(
                    "INSERT INTO answer_explanations (user_id, correlation_id, thread_id,"
                    " created_at, record) VALUES ('u', %s, 't', %s, %s)",
                    (f"c{n}/{step}", published, json.dumps({"step": step})),
                )
            # A tool call of each event, and of events whose records are gone: long ago, lately.
            calls = [(f"c{n}", step, claimed) for step, claimed, _, _ in events]
            calls += [(f"x{n}", "gone-old", days_ago(30)), (f"x{n}", "gone-recent", days_ago(1))]
            for correlation_id, step, started in calls:
                db.execute(
                    "INSERT INTO tool_calls (user_id, correlation_id, step_key, call_index,"
                    " tool_id, arguments, state, attempts, started_at, hold_until)"
                    " VALUES ('u', %s, %s, 0, 'mcp:echo', '{}', 'started', 1, %s, %s)",
                    (correlation_id, step, started, started),
                )
            # An old room (all turns expire), a long one (beyond the cap), an empty one; each
            # room's window holds a copy of its newest turns: all four of the old one's, the
            # long one's newest 14 (a window holds up to 2 * CONTEXT_PAIRS, more than a cap may).
            rooms = ((f"old{n}", 4, days_ago(400), 4), (f"long{n}", 30, NOW, 14))
            for thread, turns, at, copied in rooms:
                db.execute(
                    "INSERT INTO conversation_threads (tenant, thread_id, last_seq, session_id,"
                    " last_turn_at) VALUES (%s, %s, %s, 1, %s)",
                    (thread, thread, turns, at),
                )
                for seq in range(1, turns + 1):
                    turn = (thread, seq, "user" if seq % 2 else "assistant", at, f"{thread}:{seq}")
                    db.execute(
                        "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id,"
                        " pair_index, role, content, created_at, source_event)"
                        " VALUES (%s, %s, %s, 1, 1, %s, 'hi', %s, %s)",
                        (thread, seq, f"u{n}", *turn[2:]),
                    )
                    if seq > turns - copied:
                        db.execute(
                            "INSERT INTO channel_turns (thread_id, seq, user_id, session_id, role,"
                            " content, created_at, source_event)"
                            " VALUES (%s, %s, 'u', 1, %s, 'hi', %s, %s)",
                            turn,
                        )
            # The long room's session summaries (llm_bot/consolidation): of turns 1-10, which
            # go beyond the cap with turn 10; of turns 15-25, which go with turns 15-20; and of
            # turns 21-30, which stay with turn 30.
            for first, last in ((1, 10), (15, 25), (21, 30)):
                db.execute(
                    "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id,"
                    " pair_index, role, content, created_at, source_event)"
                    " VALUES (%s, %s, %s, 0, %s, 'summary', 'a summary', %s, %s)",
                    (f"long{n}", -last, f"u{n}", first - 1, NOW, f"summary:long{n}:{last}"),
                )
            # Facts derived from an expiring turn (with the text one replaced) and from a kept one.
            for thread, seqs in ((f"old{n}", "1,3"), (f"long{n}", "25")):
                metadata = json.dumps(
                    {"derivedFrom": thread, "window": "0-30", "sourceTurns": seqs}
                )
                key = f"derived-{thread.rstrip('0123456789')}"
                db.execute(
                    "INSERT INTO memories (user_id, key, content, metadata, created_at, updated_at)"
                    " VALUES (%s, %s, 'a fact', %s, %s, %s)",
                    (f"u{n}", key, metadata, NOW, NOW),
                )
                db.execute(
                    "INSERT INTO memory_versions (user_id, key, version, content, metadata,"
                    " valid_from, valid_to) VALUES (%s, %s, 1, 'a fact before', %s, %s, %s)",
                    (f"u{n}", key, metadata, NOW, NOW),
                )
            db.execute(
                "INSERT INTO conversation_threads (tenant, thread_id, last_seq, session_id,"
                " last_turn_at) VALUES (%s, %s, 0, 0, %s)",
                (f"empty{n}", f"empty{n}", days_ago(400)),
            )
            for age in range(5):  # five memories; the cap keeps the three created first
                db.execute(
                    "INSERT INTO memories (user_id, key, content, created_at, updated_at)"
                    " VALUES (%s, %s, 'fact', %s, %s)",
                    (f"user{n}", f"age{age}", days_ago(age), days_ago(age)),
                )
            # Earlier texts: one past the history's age, one of a capped memory, one recent.
            for key, ended in (("age0", days_ago(400)), ("age1", NOW), ("age4", NOW)):
                db.execute(
                    "INSERT INTO memory_versions (user_id, key, version, content, valid_from,"
                    " valid_to) VALUES (%s, %s, 1, 'before', %s, %s)",
                    (f"user{n}", key, days_ago(500), ended),
                )


def survivors(url: str) -> dict[str, set[str]]:
    with psycopg.connect(url) as db:
        return {
            "events": {r[0] for r in db.execute("SELECT DISTINCT step_key FROM processed_events")},
            "tool calls": {r[0] for r in db.execute("SELECT DISTINCT step_key FROM tool_calls")},
            "threads": {
                r[0].rstrip("0123456789")
                for r in db.execute("SELECT thread_id FROM conversation_threads")
            },
            "turns": {
                f"{r[0].rstrip('0123456789')}:{r[1]}"
                for r in db.execute("SELECT DISTINCT thread_id, seq FROM conversation_turns")
            },
            "window": {
                f"{r[0].rstrip('0123456789')}:{r[1]}"
                for r in db.execute("SELECT DISTINCT thread_id, seq FROM channel_turns")
            },
            "memories": {r[0] for r in db.execute("SELECT DISTINCT key FROM memories")},
            "versions": {r[0] for r in db.execute("SELECT DISTINCT key FROM memory_versions")},
            "explanations": {
                r[0] for r in db.execute("SELECT DISTINCT record->>'step' FROM answer_explanations")
            },
        }


EXPECTED_SURVIVORS = {
    "events": {"published-recent", "live-claim"},
    "tool calls": {"published-recent", "live-claim", "gone-recent"},
    "threads": {"long"},
    "turns": {f"long:{seq}" for seq in (*range(21, 31), -30)},
    "window": {f"long:{seq}" for seq in range(21, 31)},
    "memories": {"age2", "age3", "age4", "derived-long"},
    "versions": {"age4", "derived-long"},
    "explanations": {"published-recent"},
}


async def run_maintain(url: str, policy: RetentionPolicy = POLICY) -> dict[str, int]:
    async with await AsyncConnection.connect(url, autocommit=True) as connection:
        return await maintain(connection, policy, NOW, lambda line: None)


def _beyond_cap_and_derived(deleted: dict[str, int]) -> int:
    """The turns beyond the cap (20 and a summary per long room) and what was derived from
    those and the expired turns (a summary of turns on both sides of the cap, a fact and its
    earlier text), taken out of ``deleted``: a summary whose window a batch took goes as derived
    or in a later batch of the cap, as the batches fall."""
    return deleted.pop("turns_beyond_cap") + deleted.pop("derived")


async def test_expired_rows_go_and_recent_rows_stay(migrated_database_url: str) -> None:
    fill(migrated_database_url, copies=2)
    deleted = await run_maintain(migrated_database_url)
    assert _beyond_cap_and_derived(deleted) == 2 * (21 + 3)
    assert deleted == {
        "processed_events": 2 * 2,
        "tool_calls": 2 * 3,
        "answer_explanations": 2,
        "turns_expired": 2 * 4,
        "channel_turns_expired": 2 * 4,
        "channel_turns_beyond_cap": 2 * 4,
        "threads_empty": 2 * 2,
        "memories_beyond_cap": 2 * 2,
        "memory_versions": 2 * 2,
    }
    assert survivors(migrated_database_url) == EXPECTED_SURVIVORS
    assert set((await run_maintain(migrated_database_url)).values()) == {0}  # idempotent


async def test_two_runs_at_once_split_the_work(migrated_database_url: str) -> None:
    copies = 40
    fill(migrated_database_url, copies)
    first, second = await asyncio.gather(
        run_maintain(migrated_database_url), run_maintain(migrated_database_url)
    )
    together = {rule: first[rule] + second[rule] for rule in first}
    assert _beyond_cap_and_derived(together) == copies * (21 + 3)
    assert together == {
        "processed_events": copies * 2,
        "tool_calls": copies * 3,
        "answer_explanations": copies,
        "turns_expired": copies * 4,
        "channel_turns_expired": copies * 4,
        "channel_turns_beyond_cap": copies * 4,
        "threads_empty": copies * 2,
        "memories_beyond_cap": copies * 2,
        "memory_versions": copies * 2,
    }
    assert survivors(migrated_database_url) == EXPECTED_SURVIVORS


async def test_zero_keeps_everything(migrated_database_url: str) -> None:
    fill(migrated_database_url, copies=1)
    keep_all = replace(
        POLICY,
        processed_events_days=0,
        history_days=0,
        history_turns_per_thread=0,
        memories_per_user=0,
    )
    before = survivors(migrated_database_url)
    assert await run_maintain(migrated_database_url, keep_all) == {}
    assert survivors(migrated_database_url) == before
