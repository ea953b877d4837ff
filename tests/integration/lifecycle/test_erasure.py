"""Erasure finds exactly one user's (or one thread's) rows, also among ids made to collide:
prefixes, dots and wildcards in user ids, colons in user ids and channel names, a room whose
id is a user's id."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from llm_bot.db.placements import tenant_of_thread
from llm_bot.lifecycle.erasure import forget_thread, forget_user
from llm_bot.lifecycle.export import export_user

pytestmark = pytest.mark.integration

USERS = ["x", "cli:x", "a", "a.b", "a%", "u_1", "u%1"]
# Each user's DM in channel "room", and in a channel whose name holds a colon; a shared room.
THREADS = {user: [f"cli:room:{user}", f"cli:r%3Aoom:{user}"] for user in USERS}
SHARED = "cli:room"
# A room whose thread id (its tenant) reads as the user "cli:x".
LOOKALIKE = "cli:x"


def fill(url: str) -> None:
    with psycopg.connect(url) as db:
        threads = [SHARED, LOOKALIKE, *(thread for each in THREADS.values() for thread in each)]
        db.execute(
            "INSERT INTO conversation_threads (tenant, thread_id)"
            " SELECT unnest(%s::text[]), unnest(%s::text[])",
            ([tenant_of_thread(thread) for thread in threads], threads),
        )
        for user in USERS:
            db.execute(
                "INSERT INTO memories (user_id, key, content, created_at, updated_at)"
                " VALUES (%s, 'k', 'now', now(), now())",
                (user,),
            )
            db.execute(
                "INSERT INTO memory_versions (user_id, key, version, content, valid_from,"
                " valid_to) VALUES (%s, 'k', 1, 'before', now(), now())",
                (user,),
            )
            db.execute(
                "INSERT INTO agent_notes (user_id, agent_name, content) VALUES (%s, 'bot', 'n')",
                (user,),
            )
            db.execute(
                "INSERT INTO console_views (user_id, viewed_at, viewer, page)"
                " VALUES (%s, now(), 'token:ops', 'user')",
                (user,),
            )
            for seq, thread in enumerate([SHARED, *THREADS[user]]):
                db.execute(
                    "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id,"
                    " pair_index, role, content, created_at, source_event)"
                    " VALUES (%s, %s, %s, 1, 1, 'user', 'hi', now(), %s)",
                    (thread, USERS.index(user) * 10 + seq, user, f"{user}/{thread}"),
                )
                if thread == SHARED:  # the room's window holds it too
                    db.execute(
                        "INSERT INTO channel_turns (thread_id, seq, user_id, session_id, role,"
                        " content, created_at, source_event)"
                        " VALUES (%s, %s, %s, 1, 'user', 'hi', now(), %s)",
                        (thread, USERS.index(user) * 10 + seq, user, f"{user}/{thread}"),
                    )
                db.execute(
                    "INSERT INTO processed_events (correlation_id, step_key, lease_until,"
                    " user_id, thread_id) VALUES (%s, '0:llm-bot', now(), %s, %s)",
                    (f"{user}/{thread}", user, thread),
                )
                db.execute(
                    "INSERT INTO answer_explanations (user_id, correlation_id, thread_id,"
                    " created_at, record) VALUES (%s, %s, %s, now(), '{}')",
                    (user, f"{user}/{thread}", thread),
                )
                for index in range(2):  # two tool calls per event
                    db.execute(
                        "INSERT INTO tool_calls (user_id, correlation_id, step_key, call_index,"
                        " tool_id, arguments, state, attempts, started_at, hold_until)"
                        " VALUES (%s, %s, '0:llm-bot', %s, 'mcp:echo', '{}', 'started', 1,"
                        " now(), now())",
                        (user, f"{user}/{thread}", index),
                    )


def owners(url: str) -> dict[str, set[str]]:
    with psycopg.connect(url) as db:
        return {
            "threads": {r[0] for r in db.execute("SELECT thread_id FROM conversation_threads")},
            "turns": {r[0] for r in db.execute("SELECT DISTINCT user_id FROM conversation_turns")},
            "window": {r[0] for r in db.execute("SELECT DISTINCT user_id FROM channel_turns")},
            "notes": {r[0] for r in db.execute("SELECT user_id FROM agent_notes")},
            "events": {r[0] for r in db.execute("SELECT DISTINCT user_id FROM processed_events")},
            "memories": {r[0] for r in db.execute("SELECT user_id FROM memories")},
            "versions": {r[0] for r in db.execute("SELECT user_id FROM memory_versions")},
            "tool calls": {r[0] for r in db.execute("SELECT DISTINCT user_id FROM tool_calls")},
            "views": {r[0] for r in db.execute("SELECT DISTINCT user_id FROM console_views")},
            "explanations": {
                r[0] for r in db.execute("SELECT DISTINCT user_id FROM answer_explanations")
            },
        }


@pytest.mark.parametrize("gone", USERS)
async def test_forget_user_takes_exactly_their_rows(migrated_database_url: str, gone: str) -> None:
    fill(migrated_database_url)
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
        receipt = await forget_user(db, gone)
    assert receipt.deleted == {
        "memory_versions": 1,
        "memories": 1,
        "conversation_turns": 3,
        "channel_turns": 1,
        "conversation_threads": 2,
        "agent_notes": 1,
        "processed_events": 3,
        "tool_calls": 6,
        "answer_explanations": 3,
        "console_views": 1,
    }
    kept = [user for user in USERS if user != gone]
    assert owners(migrated_database_url) == {
        "threads": {SHARED, LOOKALIKE, *(thread for user in kept for thread in THREADS[user])},
        "turns": set(kept),
        "window": set(kept),
        "notes": set(kept),
        "events": set(kept),
        "memories": set(kept),
        "versions": set(kept),
        "tool calls": set(kept),
        "views": set(kept),
        "explanations": set(kept),
    }


def summarise(url: str, window: tuple[int, int], users: list[str]) -> None:
    """A summary of the shared room's turns ``(after, last]`` in each of ``users``' rows, as
    consolidation writes a shared window's (llm_bot/consolidation/derive.py)."""
    after, last = window
    with psycopg.connect(url) as db:
        for user in users:
            db.execute(
                "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id,"
                " pair_index, role, content, created_at, source_event)"
                " VALUES (%s, %s, %s, 0, %s, 'summary', 'everyone said hi', now(), %s)",
                (SHARED, -last, user, after, f"consolidate:{SHARED}:{after}-{last}"),
            )


async def test_forget_user_takes_the_summaries_of_windows_they_spoke_in_from_every_speaker(
    migrated_database_url: str,
) -> None:
    fill(migrated_database_url)  # in the room, each user's turn is seq 10 * their index
    summarise(migrated_database_url, (5, 25), ["cli:x", "a"])  # cli:x's turn 10, a's turn 20
    summarise(migrated_database_url, (25, 35), ["a.b"])  # a.b's turn 30
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
        receipt = await forget_user(db, "a")
    assert receipt.deleted["conversation_turns"] == 3 + 2  # a's turns, both copies of (5, 25]
    with psycopg.connect(migrated_database_url) as db:
        summaries = db.execute(
            "SELECT user_id, seq FROM conversation_turns WHERE role = 'summary'"
        ).fetchall()
    assert summaries == [("a.b", -35)]


def derive(url: str, user: str, thread: str) -> None:
    """What consolidation derives from ``thread`` for ``user``: a memory naming the thread and a
    session summary among the thread's turns (llm_bot/consolidation)."""
    with psycopg.connect(url) as db:
        db.execute(
            "INSERT INTO memories (user_id, key, content, metadata, created_at, updated_at)"
            " VALUES (%s, %s, 'derived', %s, now(), now())",
            (user, f"derived-{len(thread)}", Jsonb({"derivedFrom": thread})),
        )
        db.execute(  # the text it replaced, derived from the thread too
            "INSERT INTO memory_versions (user_id, key, version, content, metadata, valid_from,"
            " valid_to) VALUES (%s, %s, 1, 'derived before', %s, now(), now())",
            (user, f"derived-{len(thread)}", Jsonb({"derivedFrom": thread})),
        )
        db.execute(
            "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
            " role, content, created_at, source_event)"
            " VALUES (%s, -2, %s, 0, 0, 'summary', 'a summary', now(), %s)",
            (thread, user, f"consolidate:{thread}"),
        )


async def test_forget_thread_takes_every_speakers_turns_there_only(
    migrated_database_url: str,
) -> None:
    fill(migrated_database_url)
    derive(migrated_database_url, USERS[0], SHARED)
    derive(migrated_database_url, USERS[0], THREADS[USERS[0]][0])  # another thread's: stays
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
        receipt = await forget_thread(db, SHARED)
    everyone = len(USERS)
    assert receipt.deleted == {
        "conversation_turns": everyone + 1,  # and the summary
        "channel_turns": everyone,
        "conversation_threads": 1,
        "memories": 1,  # the one derived from it
        "memory_versions": 1,  # and its earlier text
        "tool_calls": 2 * everyone,
        "processed_events": everyone,
        "answer_explanations": everyone,
    }
    with psycopg.connect(migrated_database_url) as db:
        derived = db.execute(
            "SELECT metadata->>'derivedFrom' FROM memories WHERE content = 'derived'"
        )
        assert derived.fetchall() == [(THREADS[USERS[0]][0],)]
    left = owners(migrated_database_url)
    assert SHARED not in left["threads"]
    assert left["window"] == set()
    with psycopg.connect(migrated_database_url) as db:
        row = db.execute("SELECT count(*) FROM conversation_turns").fetchone()
    assert row is not None
    assert row[0] == 2 * everyone + 1  # every DM turn stays, and the DM's summary
    with psycopg.connect(migrated_database_url) as db:
        calls = db.execute("SELECT count(*) FROM tool_calls").fetchone()
    assert calls == (2 * 2 * everyone,)  # the DMs' events' calls stay


async def test_an_export_holds_the_users_tool_calls_as_the_erasure_takes_them(
    migrated_database_url: str,
) -> None:
    fill(migrated_database_url)
    async with await AsyncConnection.connect(migrated_database_url, autocommit=True) as db:
        document = await export_user(db, "a.b")
    calls = document["tables"]["tool_calls"]
    assert {(call["user_id"], call["tool_id"], call["state"]) for call in calls} == {
        ("a.b", "mcp:echo", "started")
    }
    assert len(calls) == 6
    explanations = document["tables"]["answer_explanations"]
    assert {(row["user_id"], row["correlation_id"]) for row in explanations} == {
        ("a.b", f"a.b/{thread}") for thread in [SHARED, *THREADS["a.b"]]
    }
