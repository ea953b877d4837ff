"""Migration 0019 on a database of before: every thread gets its tenant (a DM's user, a room's
own id), a room's newest turns become its window, a processed-event record without a user gets
the user no event has, and what was stored reads back through the new keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import AsyncConnection

from llm_bot.db.migrate import migrate
from llm_bot.memory.turns.window import read_window

from .todays_form import migrate_through

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
IDLE = timedelta(hours=1)
ROOM = "slack:C1"
ROOM_TURNS = 36
# (thread id, the user of its turns, its tenant): DMs whose user id or channel holds ':' (the
# channel escaped, as identity.py writes it), and a room whose channel held one.
THREADS = [
    ("discord:dm-1:twitch:42", "twitch:42", "twitch:42"),
    ("slack:x%3Ay:ada", "ada", "ada"),
    ("discord:a%3Ab", "bo", "discord:a%3Ab"),
]


def fill_as_before(url: str) -> None:
    migrate_through(url, 18)
    with psycopg.connect(url) as db:
        for thread, user, _ in THREADS:
            db.execute(
                "INSERT INTO conversation_threads (thread_id, last_seq, session_id,"
                " last_turn_at) VALUES (%s, 1, 1, %s)",
                (thread, AT),
            )
            db.execute(
                "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
                " role, content, created_at, source_event)"
                " VALUES (%s, 1, %s, 1, 1, 'user', 'hi', %s, %s)",
                (thread, user, AT, f"{thread}/1"),
            )
        db.execute(
            "INSERT INTO conversation_threads (thread_id, last_seq, session_id, last_turn_at)"
            " VALUES (%s, %s, 1, %s)",
            (ROOM, ROOM_TURNS, AT),
        )
        for seq in range(1, ROOM_TURNS + 1):  # two speakers, pair by pair
            db.execute(
                "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
                " role, content, created_at, source_event, visibility)"
                " VALUES (%s, %s, %s, 1, %s, %s, %s, %s, %s, 'public')",
                (
                    ROOM,
                    seq,
                    f"speaker-{(seq + 1) // 2 % 2}",
                    (seq + 1) // 2,
                    "user" if seq % 2 else "assistant",
                    f"turn {seq}",
                    AT,
                    f"room/{(seq + 1) // 2}",
                ),
            )
        # A claim that never stored an output (no user then), and a stored record.
        db.execute(
            "INSERT INTO processed_events (correlation_id, step_key, lease_until)"
            " VALUES ('lost', '0:llm-bot', %s)",
            (AT,),
        )
        db.execute(
            "INSERT INTO processed_events (correlation_id, step_key, lease_until, user_id)"
            " VALUES ('kept', '0:llm-bot', %s, 'ada')",
            (AT,),
        )


async def test_threads_get_their_tenant_and_a_room_its_window(fresh_database_url: str) -> None:
    fill_as_before(fresh_database_url)
    assert migrate(fresh_database_url)[0] == "0019_tenant_keys.sql"  # and any later ones
    with psycopg.connect(fresh_database_url) as db:
        tenants = set(db.execute("SELECT thread_id, tenant FROM conversation_threads").fetchall())
        window = db.execute(
            "SELECT thread_id, seq, user_id, content, source_event, visibility FROM channel_turns"
            " ORDER BY seq"
        ).fetchall()
        records = dict(
            db.execute("SELECT correlation_id, user_id FROM processed_events").fetchall()
        )
    assert tenants == {(thread, tenant) for thread, _, tenant in THREADS} | {(ROOM, ROOM)}
    # The room's newest 30 turns; the DMs have none, the one-turn room its one.
    room = [row for row in window if row[0] == ROOM]
    assert [row[1] for row in room] == list(range(ROOM_TURNS - 29, ROOM_TURNS + 1))
    assert room[-1] == (
        ROOM,
        ROOM_TURNS,
        f"speaker-{ROOM_TURNS // 2 % 2}",
        f"turn {ROOM_TURNS}",
        f"room/{ROOM_TURNS // 2}",
        "public",
    )
    assert {row[0] for row in window} == {ROOM, "discord:a%3Ab"}
    assert records == {"lost": "", "kept": "ada"}

    async with await AsyncConnection.connect(fresh_database_url) as connection:
        room_window = await read_window(connection, ROOM, 15, AT, IDLE)
        dm_window = await read_window(connection, "slack:x%3Ay:ada", 15, AT, IDLE)
    assert [turn.seq for turn in room_window] == list(range(ROOM_TURNS - 29, ROOM_TURNS + 1))
    assert [(turn.user_id, turn.content) for turn in dm_window] == [("ada", "hi")]
