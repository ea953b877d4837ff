"""`llm-bot migrate` against a real Postgres: creates the schema once, then changes nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psycopg
import pytest

from llm_bot.cli import main
from llm_bot.db.migrate import available_migrations, migrate
from llm_bot.events.codec import encode
from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.prompt_events import prompt_event

from .todays_form import create_langgraph_store, migrate_through

pytestmark = pytest.mark.integration


def test_migrate_is_idempotent(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", fresh_database_url)
    # The size is given, so neither a model call nor a model load is needed.
    monkeypatch.setenv("MEMORY_EMBEDDING_DIMENSIONS", "384")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    assert main(["migrate"]) == 0
    first = capsys.readouterr().out
    assert main(["migrate"]) == 0
    second = capsys.readouterr().out
    assert first.startswith(f"applied {len(available_migrations())} migration(s)")
    assert second.splitlines() == [
        "applied 0 migration(s): schema already current",
        "memory store ready: 384-dimension vectors",
    ]
    with psycopg.connect(fresh_database_url) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_migrations")]
    assert versions == [m.version for m in available_migrations()]
    with psycopg.connect(fresh_database_url) as connection:
        tables = connection.execute("SELECT to_regclass('memories')::text").fetchone()
    assert tables == ("memories",), "migrate creates the memories' table"


def test_every_table_has_a_replica_identity(fresh_database_url: str) -> None:
    """Citus moves a shard group without blocking its writes (a node added or drained,
    docs/citus.md) only when every table in it can replicate its updates and deletes: a
    primary key, a replica index or ``REPLICA IDENTITY FULL``."""
    migrate(fresh_database_url)
    with psycopg.connect(fresh_database_url) as connection:
        without = connection.execute(
            "SELECT relname FROM pg_class"
            " WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')"
            "   AND relreplident <> 'f' AND NOT EXISTS (SELECT FROM pg_index"
            "     WHERE indrelid = pg_class.oid AND (indisprimary OR indisreplident))"
        ).fetchall()
    assert without == []


def test_thread_ids_written_before_escaping_are_rewritten_and_stay_reachable(
    fresh_database_url: str,
) -> None:
    """Migration 0005 on rows in the old form: a room whose channel holds ':', a DM whose user
    id holds ':', a plain room and DM (unchanged)."""
    migrate_through(fresh_database_url, 4)
    old = [  # (thread id as written before, the user of its turns, the id it must become)
        ("discord:a:b", "u1", "discord:a%3Ab"),  # room 'a:b' (two speakers below)
        ("discord:a:b", "u2", "discord:a%3Ab"),
        ("discord:dm-1:twitch:42", "twitch:42", "discord:dm-1:twitch:42"),  # DM: unchanged
        ("slack:x:y:twitch:7", "twitch:7", "slack:x%3Ay:twitch:7"),  # DM in channel 'x:y'
        ("slack:C1", "u3", "slack:C1"),
    ]
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        for seq, (thread, user, _) in enumerate(old):
            connection.execute(
                "INSERT INTO conversation_threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING",
                (thread,),
            )
            connection.execute(
                "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
                " role, content, created_at, source_event)"
                " VALUES (%s, %s, %s, 0, 0, 'user', 'hi', now(), %s)",
                (thread, seq, user, f"event-{seq}"),
            )
    assert migrate_through(fresh_database_url, 5) == ["0005_unambiguous_thread_ids.sql"]
    with psycopg.connect(fresh_database_url) as connection:
        turns = connection.execute(
            "SELECT thread_id, user_id FROM conversation_turns ORDER BY seq"
        ).fetchall()
        threads = {
            row[0] for row in connection.execute("SELECT thread_id FROM conversation_threads")
        }
    assert turns == [(new, user) for _, user, new in old]
    assert threads == {new for _, _, new in old}


def _event(user: str, channel: str | None, direct: bool, platform_only: bool) -> InternalEventV2:
    event = prompt_event("hi", user=user, thread=channel or "x", egress_topic="out")
    event.egress.channel = channel
    event.ingress.channel = channel
    event.egress.type = "dm" if direct else "chat"
    if platform_only:
        event.identity.user = None
        event.identity.external.platform = "twitch:tv"
    return event


@pytest.mark.parametrize(
    ("user", "channel", "direct", "platform_only"),
    [
        ("quinn", "room", False, False),
        ("quinn", "room", True, False),
        ("a:b", "r:o%m", True, False),
        ("42", "room", True, True),
        ("quinn", None, False, False),
    ],
)
def test_processed_events_stored_before_0009_get_their_user_and_thread(
    fresh_database_url: str, user: str, channel: str | None, direct: bool, platform_only: bool
) -> None:
    """Migration 0009 reads the ids back from the stored event by the rules of
    llm_bot/events/identity.py, so erasure finds records written before it."""
    migrate_through(fresh_database_url, 8)
    event = _event(user, channel, direct, platform_only)
    data, _ = encode(event)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO processed_events (correlation_id, step_key, lease_until, outcome,"
            " output_data) VALUES ('event', '0', now(), 'OK', %s), ('junk', '0', now(), 'OK',"
            " '\\xff00')",
            (data,),
        )
    migrate_through(fresh_database_url, 9)
    with psycopg.connect(fresh_database_url) as connection:
        rows = dict(
            connection.execute(
                "SELECT correlation_id, (user_id, thread_id) FROM processed_events"
            ).fetchall()
        )
    assert rows["event"] == (user_id_of(event), thread_id_of(event))
    assert rows["junk"] == (None, None)


def test_migrate_gives_up_on_a_database_that_never_answers() -> None:
    """An address that takes the connection but never speaks (a wrong host behind a firewall,
    a stuck proxy) fails the migrate job after DATABASE_CONNECT_TIMEOUT_S instead of holding it
    until Cloud Run's task timeout."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never accepts or answers
        port = silent.getsockname()[1]
        env = {
            **os.environ,
            "DATABASE_URL": f"postgresql://llm_bot@127.0.0.1:{port}/llm_bot",
            "DATABASE_CONNECT_TIMEOUT_S": "2",
        }
        began = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "llm_bot.cli", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("llm-bot: database unreachable:")
    assert time.monotonic() - began < 30


def test_rows_that_do_not_say_where_they_were_learned_become_private(
    fresh_database_url: str,
) -> None:
    """Migration 0012: notes last written before 0007 and memories without ``learnedIn`` were
    read as public; their origin is unknown, so they become private, and so does any row whose
    writer leaves the column out."""
    migrate_through(fresh_database_url, 11)
    create_langgraph_store(fresh_database_url, 384, 384)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO agent_notes (user_id, agent_name, content, learned_in, updated_at)"
            " VALUES ('old', 'llm-bot', 'seeing a therapist', 'public', now() - interval '1 day'),"
            " ('new', 'llm-bot', 'likes chess', 'public', now() + interval '1 day')"
        )
        connection.execute(
            "INSERT INTO store (prefix, key, value) VALUES"
            " ('memories.old', 'k1', '{\"content\": \"has depression\", \"metadata\": {}}'),"
            ' (\'memories.new\', \'k2\', \'{"content": "likes tea", "learnedIn": "public"}\')'
        )
        connection.execute(
            "INSERT INTO memory_versions (prefix, key, version, content, learned_in, valid_from,"
            " valid_to) VALUES ('memories.old', 'k1', 1, 'sad', 'public', now(), now())"
        )
    assert migrate_through(fresh_database_url, 12) == ["0012_private_by_default.sql"]
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        notes = dict(connection.execute("SELECT user_id, learned_in FROM agent_notes").fetchall())
        memories = dict(connection.execute("SELECT key, value->>'learnedIn' FROM store").fetchall())
        versions = connection.execute("SELECT learned_in FROM memory_versions").fetchall()
        connection.execute(
            "INSERT INTO agent_notes (user_id, agent_name, content) VALUES ('later', 'a', 'x')"
        )
        later = connection.execute(
            "SELECT learned_in FROM agent_notes WHERE user_id = 'later'"
        ).fetchone()
    assert notes == {"old": "dm", "new": "public"}
    assert memories == {"k1": "dm", "k2": "public"}
    assert versions == [("dm",)]
    assert later == ("dm",)
