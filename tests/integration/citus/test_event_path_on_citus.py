"""One event's statements on a migrated Citus cluster: the claim, the stored output with the
history pair, the "published" mark, the window and recall. A DM event's transaction commits on
its user's node without two-phase commit; a shared channel's pair writes its author's shard and
the channel's in one atomic transaction (two-phase when they are on two nodes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection

from llm_bot.db.migrate import migrate
from llm_bot.db.processed_events import (
    Claim,
    EventKey,
    Held,
    StoredOutput,
    mark_published,
    renew,
    store_output,
    try_claim,
)
from llm_bot.db.vectors import register_vectors
from llm_bot.memory.recall import recall
from llm_bot.memory.turns.window import PairRows, read_window, write_pair
from llm_bot_tools.local.citus_cluster import CitusCluster

pytestmark = [pytest.mark.integration, pytest.mark.citus]

PREPARE = "PREPARE TRANSACTION"
AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
IDLE = timedelta(hours=1)
WINDOW_PAIRS = 2
LEASE_S = 30.0
VECTOR = [1.0, 0.0, 0.0]


@dataclass
class Session:
    """A coordinator connection on which Citus reports each command it sends to a worker."""

    conn: AsyncConnection[object]
    logged: list[str]

    def take(self) -> list[str]:
        logged, self.logged[:] = list(self.logged), []
        return logged


@pytest.fixture
async def session(citus_database_url: str) -> AsyncIterator[Session]:
    migrate(citus_database_url)
    async with await AsyncConnection.connect(citus_database_url, autocommit=True) as conn:
        await conn.execute("INSERT INTO embedding_space (model, dimensions) VALUES ('m', 3)")
        await register_vector_async(conn)
        register_vectors(conn)  # vector_param's
        logged: list[str] = []
        conn.add_notice_handler(lambda notice: logged.append(notice.message_primary or ""))
        await conn.execute("SET citus.log_remote_commands = on")
        yield Session(conn, logged)


def node_of(url: str, table: str, tenant: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT nodeport FROM citus_shards"
            " WHERE shardid = get_shard_id_for_distribution_column(%s, %s::text)",
            (table, tenant),
        ).fetchone()
    assert row is not None
    return int(row[0])


def on_another_node(url: str, user: str) -> str:
    """A shared channel whose shard is on another node than ``user``'s."""
    user_node = node_of(url, "conversation_turns", user)
    for number in range(100):
        channel = f"cli:room-{number}"
        if node_of(url, "conversation_threads", channel) != user_node:
            return channel
    raise AssertionError("every channel tried is on the user's node")


def two_phase_commits(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
    assert row is not None
    return int(row[0])


async def claim(session: Session, key: EventKey) -> Claim:
    async with session.conn.transaction():
        claimed = await try_claim(session.conn, key, LEASE_S)
    assert isinstance(claimed, Claim)
    return claimed


async def answer(session: Session, claimed: Claim, pair: PairRows) -> None:
    """The event's output and its pair in one transaction, as the worker commits them."""
    output = StoredOutput("out", b"{}", {}, "", "OK", pair.thread_id)
    async with session.conn.transaction():
        space = await store_output(session.conn, claimed, output)
        assert space is not None
        await write_pair(session.conn, pair, IDLE, WINDOW_PAIRS)


def pair_of(thread: str, user: str, number: int) -> PairRows:
    return PairRows(
        thread,
        user,
        f"question {number}",
        f"answer {number}",
        AT,
        f"{user}/{number}",
        VECTOR,
        VECTOR,
        "public",
    )


async def test_a_dm_event_commits_on_its_users_node_alone(
    citus_cluster: CitusCluster, citus_database_url: str, session: Session
) -> None:
    user = "ada"
    thread = f"cli:dm:{user}"
    key = EventKey(user, "event-1", "0:llm-bot")
    claimed = await claim(session, key)
    recorded = two_phase_commits(citus_database_url)
    session.take()
    await answer(session, claimed, pair_of(thread, user, 1))
    await answer(session, claimed, pair_of(thread, user, 1))  # a rerun: nothing twice
    async with session.conn.transaction():
        await mark_published(session.conn, [key])
    logged = session.take()
    assert any(line.startswith("issuing COMMIT") for line in logged), logged
    assert not any(PREPARE in line for line in logged), logged
    assert two_phase_commits(citus_database_url) == recorded
    for worker in citus_cluster.workers:
        with psycopg.connect(worker.url_for(session.conn.info.dbname)) as direct:
            assert direct.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)

    async with session.conn.transaction():  # a redelivery finds it published
        again = await try_claim(session.conn, key, LEASE_S)
    assert isinstance(again, Held)
    assert again.published
    window = await read_window(session.conn, thread, WINDOW_PAIRS, AT, IDLE)
    assert [(turn.seq, turn.content) for turn in window] == [(1, "question 1"), (2, "answer 1")]
    found = await recall(
        session.conn, user, "question", VECTOR, exclude=set(), limit=5, threshold=-1.0
    )
    assert {(turn.thread_id, turn.seq) for turn in found.turns} == {(thread, 1), (thread, 2)}


async def test_a_shared_channel_pair_writes_both_shards_at_once(
    citus_database_url: str, session: Session
) -> None:
    user = "bo"
    channel = on_another_node(citus_database_url, user)
    for number in range(3):
        key = EventKey(user, f"event-{number}", "0:llm-bot")
        claimed = await claim(session, key)
        session.take()
        await answer(session, claimed, pair_of(channel, user, number))
        logged = session.take()
        assert sum(PREPARE in line for line in logged) == 2, logged  # one per node
        await renew(session.conn, [claimed], LEASE_S)

    window = await read_window(session.conn, channel, WINDOW_PAIRS, AT, IDLE)
    assert [turn.seq for turn in window] == [3, 4, 5, 6]  # the newest two pairs
    async with session.conn.cursor() as cursor:
        await cursor.execute(
            "SELECT count(*) FROM conversation_turns WHERE user_id = %s AND thread_id = %s",
            (user, channel),
        )
        assert await cursor.fetchone() == (6,)
        await cursor.execute("SELECT count(*) FROM channel_turns WHERE thread_id = %s", (channel,))
        assert await cursor.fetchone() == (2 * WINDOW_PAIRS,)
