"""The once-only ledger of tool calls on a real database, as two workers would use it (each its
own ledger on the pool, on one clock the test moves): a recorded call is answered without
being sent; a call whose sender stopped is sent once more, then never; calls at the same key
at the same instant are sent once; other users, events, steps and indexes never interfere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import RowFactory, dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.migrate import migrate
from llm_bot.db.pools import open_pool
from llm_bot.events.inbound import EventKey
from llm_bot.platform_tools.calls import CallKey, ToolOutcome
from llm_bot.platform_tools.ledger import PostgresToolLedger, call_states

from ...from_settings import settings_for
from ..db.todays_form import migrate_through

pytestmark = pytest.mark.integration

HOLD_S = 20.0
WAIT_S = 10.0
KEY = CallKey("twitch:42", "corr-1", "0:llm-bot", 0)
ARGS = {"user": "twitch:7", "reason": "spam"}


class Clock:
    """The ledgers' clock; ``reads`` counts its readings (one per claim or wait)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, tzinfo=UTC)
        self.reads = 0
        self.read = asyncio.Event()

    def __call__(self) -> datetime:
        self.reads += 1
        self.read.set()
        return self.now

    def past_hold(self) -> None:
        self.now += timedelta(seconds=HOLD_S + 1)


class Died(Exception):
    """The sender stopped after the call was sent (a crash, a kill, its event cancelled)."""


class Tool:
    """A tool with a side effect: counts how often it is really called."""

    def __init__(self, answer: str = "banned", *, dies: bool = False) -> None:
        self.answer, self.dies = answer, dies
        self.calls = 0
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self) -> ToolOutcome:
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.dies:
            raise Died
        return ToolOutcome(f"{self.answer} #{self.calls}")


Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]


@pytest.fixture
async def pool(migrated_database_url: str) -> AsyncIterator[Pool]:
    async with open_pool(settings_for(migrated_database_url), "ledger") as opened:
        yield opened


@pytest.fixture
def clock() -> Clock:
    return Clock()


def worker(pool: Pool, clock: Clock) -> PostgresToolLedger:
    return PostgresToolLedger(pool, hold_s=HOLD_S, clock=clock)


async def row(pool: Pool, key: CallKey = KEY) -> tuple[Any, ...] | None:
    async with pool.connection() as connection:
        cursor = await connection.execute(
            "SELECT state, attempts, outcome, is_error FROM tool_calls WHERE user_id = %s"
            " AND correlation_id = %s AND step_key = %s AND call_index = %s",
            (key.user_id, key.correlation_id, key.step_key, key.call_index),
        )
        return await cursor.fetchone()


async def test_a_recorded_call_is_answered_without_being_sent(pool: Pool, clock: Clock) -> None:
    tool = Tool()
    first = await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool)
    again = await worker(pool, clock).once(KEY, "mcp:ban_user", dict(ARGS), tool)
    assert tool.calls == 1
    assert first == again == ToolOutcome("banned #1")
    assert await row(pool) == ("done", 1, "banned #1", False)


async def test_an_error_outcome_and_unstorable_text_are_recorded_as_answered(
    pool: Pool, clock: Clock
) -> None:
    """NUL is refused by Postgres text and jsonb; a model's or server's text may hold it."""
    calls = 0

    async def failing() -> ToolOutcome:
        nonlocal calls
        calls += 1
        return ToolOutcome("timed out\x00", is_error=True)

    hostile = {"text\x00": ["a\x00b", {"n": 1}]}
    await worker(pool, clock).once(KEY, "mcp:echo", hostile, failing)
    again = await worker(pool, clock).once(KEY, "mcp:echo", hostile, failing)
    assert calls == 1
    assert again == ToolOutcome("timed out\ufffd", is_error=True)


async def test_a_call_whose_sender_stopped_is_sent_once_more_then_never(
    pool: Pool, clock: Clock
) -> None:
    tool = Tool(dies=True)
    with pytest.raises(Died):
        await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool)
    assert await row(pool) == ("started", 1, None, None)
    clock.past_hold()
    with pytest.raises(Died):
        await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool)
    assert tool.calls == 2
    clock.past_hold()
    unknown = await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool)
    assert tool.calls == 2
    assert unknown.is_error
    assert "unknown" in unknown.text
    assert await row(pool) == ("started", 2, None, None)


async def test_an_answered_repeat_is_recorded_and_answered_from_then_on(
    pool: Pool, clock: Clock
) -> None:
    dying = Tool(dies=True)
    with pytest.raises(Died):
        await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, dying)
    clock.past_hold()
    tool = Tool()
    assert await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool) == ToolOutcome(
        "banned #1"
    )
    clock.past_hold()
    assert await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool) == ToolOutcome(
        "banned #1"
    )
    assert (dying.calls, tool.calls) == (1, 1)
    assert await row(pool) == ("done", 2, "banned #1", False)


async def test_a_started_call_within_its_hold_is_waited_for_not_sent_again(
    pool: Pool, clock: Clock
) -> None:
    """Two holders of one event at once: the second waits for the first one's answer."""
    tool = Tool()
    tool.gate = asyncio.Event()
    first = asyncio.create_task(worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool))
    await asyncio.wait_for(tool.entered.wait(), WAIT_S)
    second = asyncio.create_task(worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool))
    await wait_for_reads(clock, 3)  # the first sender's claim, the second's claim and a wait
    assert not second.done()
    tool.gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    assert tool.calls == 1
    assert outcomes == [ToolOutcome("banned #1")] * 2


async def wait_for_reads(clock: Clock, reads: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while clock.reads < reads:
            clock.read.clear()
            await clock.read.wait()


async def test_calls_at_one_key_at_the_same_instant_are_sent_once(pool: Pool, clock: Clock) -> None:
    tool = Tool()
    ledgers = [worker(pool, clock) for _ in range(8)]
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(ledger.once(KEY, "mcp:ban_user", ARGS, tool) for ledger in ledgers)),
        WAIT_S,
    )
    assert tool.calls == 1
    assert set(outcomes) == {ToolOutcome("banned #1")}


async def test_other_users_events_steps_and_indexes_do_not_interfere(
    pool: Pool, clock: Clock
) -> None:
    keys = [
        KEY,
        CallKey("twitch:43", KEY.correlation_id, KEY.step_key, KEY.call_index),
        CallKey(KEY.user_id, "corr-2", KEY.step_key, KEY.call_index),
        CallKey(KEY.user_id, KEY.correlation_id, "2:llm-bot", KEY.call_index),
        CallKey(KEY.user_id, KEY.correlation_id, KEY.step_key, 1),
    ]
    tool = Tool()
    ledger = worker(pool, clock)
    outcomes = [await ledger.once(key, "mcp:ban_user", ARGS, tool) for key in keys]
    assert tool.calls == len(keys)
    assert outcomes == [ToolOutcome(f"banned #{n}") for n in range(1, len(keys) + 1)]
    replayed = [await ledger.once(key, "mcp:ban_user", ARGS, tool) for key in keys]
    assert replayed == outcomes


@pytest.mark.parametrize(
    ("tool_id", "arguments"),
    [("mcp:ban_user", {"user": "twitch:8", "reason": "spam"}), ("mcp:create_schedule", ARGS)],
)
async def test_another_call_at_a_recorded_index_is_never_sent(
    pool: Pool, clock: Clock, tool_id: str, arguments: dict[str, str]
) -> None:
    tool = Tool()
    await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, tool)
    other = await worker(pool, clock).once(KEY, tool_id, arguments, tool)
    assert tool.calls == 1
    assert other.is_error
    assert "mcp:ban_user" in other.text
    assert "banned #1" in other.text


async def test_another_call_at_a_started_index_is_not_sent(pool: Pool, clock: Clock) -> None:
    dying = Tool(dies=True)
    with pytest.raises(Died):
        await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, dying)
    clock.past_hold()
    tool = Tool()
    other = await worker(pool, clock).once(KEY, "mcp:ban_user", {"user": "twitch:8"}, tool)
    assert (dying.calls, tool.calls) == (1, 0)
    assert other.is_error
    assert await row(pool) == ("started", 1, None, None)


@pytest.mark.parametrize("row_factory", [tuple_row, dict_row])
async def test_an_events_calls_are_read_by_index_with_how_each_ended(
    pool: Pool, clock: Clock, migrated_database_url: str, row_factory: RowFactory[Any]
) -> None:
    """As an explanation reads them, on a connection of tuples (``llm-bot explain``) or of
    dicts (the console's memory store): another event's call is not among them."""
    await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, Tool())
    started = CallKey(KEY.user_id, KEY.correlation_id, KEY.step_key, 1)
    with pytest.raises(Died):
        await worker(pool, clock).once(started, "mcp:ban_user", ARGS, Tool(dies=True))
    other = CallKey(KEY.user_id, "corr-2", KEY.step_key, 2)
    await worker(pool, clock).once(other, "mcp:ban_user", ARGS, Tool())
    event = EventKey(KEY.user_id, KEY.correlation_id, KEY.step_key)
    connect = psycopg.AsyncConnection.connect(migrated_database_url, row_factory=row_factory)
    async with await connect as connection:
        assert await call_states(connection, event) == {0: "done", 1: "started"}


async def test_an_outcome_that_cannot_be_recorded_is_still_answered(
    pool: Pool, clock: Clock
) -> None:
    """The database goes away between the call and its record: the call was made, so its
    outcome is answered; the row stays started (within the one repeat)."""

    async def call_then_lose_the_table() -> ToolOutcome:
        async with pool.connection() as connection:
            await connection.execute("ALTER TABLE tool_calls RENAME TO tool_calls_away")
        return ToolOutcome("banned")

    outcome = await worker(pool, clock).once(KEY, "mcp:ban_user", ARGS, call_then_lose_the_table)
    async with pool.connection() as connection:
        await connection.execute("ALTER TABLE tool_calls_away RENAME TO tool_calls")
    assert outcome == ToolOutcome("banned")
    assert await row(pool) == ("started", 1, None, None)


async def test_the_table_comes_to_a_database_migrated_to_0013(fresh_database_url: str) -> None:
    assert migrate_through(fresh_database_url, 13)
    with psycopg.connect(fresh_database_url) as db:
        assert db.execute("SELECT to_regclass('tool_calls')").fetchone() == (None,)
    assert "0017_tool_calls.sql" in migrate(fresh_database_url)
    async with open_pool(settings_for(fresh_database_url), "ledger") as pool:
        await worker(pool, Clock()).once(KEY, "mcp:ban_user", ARGS, Tool())
        assert await row(pool) == ("done", 1, "banned #1", False)
