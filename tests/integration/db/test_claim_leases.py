"""Claim leases on the real database: a live holder keeps its event however long it takes; a
holder that stops renewing (it died) loses the event within one short lease; a renewal passes
over a claim whose row another transaction holds, without waiting for it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.batches import Work
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.leases import LeaseKeeper
from llm_bot.db.processed_events import (
    Claim,
    ClaimBusy,
    EventKey,
    claim_or_wait,
    release,
    renew,
)

from ...support.locks import lock_waiters

pytestmark = pytest.mark.integration

LEASE_S = 1.0


@pytest.fixture
async def transact(
    migrated_pool: AsyncConnectionPool[Any],
) -> AsyncIterator[Callable[[Work, Collection[str]], Awaitable[None]]]:
    async with GroupCommitter(migrated_pool, max_batch=4, max_delay_s=0.0) as committer:
        yield committer.commit


async def claim(
    transact: Callable[[Work, Collection[str]], Awaitable[None]], key: EventKey, wait_s: float
) -> Claim:
    claimed = await claim_or_wait(transact, key, lease_s=LEASE_S, wait_s=wait_s)
    assert isinstance(claimed, Claim)
    return claimed


async def test_a_renewed_claim_outlives_many_leases_and_an_abandoned_one_is_taken_over_in_one(
    migrated_pool: AsyncConnectionPool[Any],
    transact: Callable[[Work, Collection[str]], Awaitable[None]],
) -> None:
    key = EventKey("ada", "slow-event", "0:llm-bot")
    first = await claim(transact, key, wait_s=0)
    async with LeaseKeeper(migrated_pool, lease_s=LEASE_S) as keeper:
        with keeper.holding(first), pytest.raises(ClaimBusy):  # four leases on, still held
            await claim_or_wait(transact, key, lease_s=LEASE_S, wait_s=4 * LEASE_S)
        began = time.monotonic()  # the holder stops renewing, as a killed worker does
        second = await claim(transact, key, wait_s=10 * LEASE_S)
    taken_over_s = time.monotonic() - began
    assert second.token != first.token
    assert second.attempt == 2
    assert taken_over_s <= LEASE_S + 0.5, f"taken over after {taken_over_s:.2f} s"


async def test_a_released_claim_is_taken_at_once_and_keeps_its_attempt_count(
    migrated_pool: AsyncConnectionPool[Any],
    transact: Callable[[Work, Collection[str]], Awaitable[None]],
) -> None:
    key = EventKey("ada", "failed-event", "0:llm-bot")
    first = await claim(transact, key, wait_s=0)
    async with migrated_pool.connection() as connection:
        await release(connection, first)
    second = await claim(transact, key, wait_s=0)  # no wait: the lease ended with the release
    assert (first.attempt, second.attempt) == (1, 2)


async def lease_until(pool: AsyncConnectionPool[Any], key: EventKey) -> Any:
    async with pool.connection() as connection:
        row = await (
            await connection.execute(
                "SELECT lease_until FROM processed_events"
                " WHERE user_id = %s AND correlation_id = %s",
                (key.user_id, key.correlation_id),
            )
        ).fetchone()
    assert row is not None
    return row[0]


async def test_a_renewal_passes_over_a_row_another_transaction_holds_and_renews_the_rest(
    migrated_pool: AsyncConnectionPool[Any],
    transact: Callable[[Work, Collection[str]], Awaitable[None]],
) -> None:
    held_key = EventKey("ada", "being-stored", "0:llm-bot")
    free_key = EventKey("ada", "being-answered", "0:llm-bot")
    held, free = [await claim(transact, key, wait_s=0) for key in (held_key, free_key)]
    leases_before = [await lease_until(migrated_pool, key) for key in (held_key, free_key)]
    # The row held as the committer's batch holds it:
    async with migrated_pool.connection() as writer, writer.transaction():
        await writer.execute(
            "UPDATE processed_events SET attempts = attempts"
            " WHERE user_id = %s AND correlation_id = %s",
            (held_key.user_id, held_key.correlation_id),
        )
        async with migrated_pool.connection() as connection, asyncio.timeout(5):  # waits on no lock
            await renew(connection, [held, free], 10 * LEASE_S)
    leases_after = [await lease_until(migrated_pool, key) for key in (held_key, free_key)]
    assert leases_after[0] == leases_before[0]  # passed over: its holder renews it next time
    assert leases_after[1] > leases_before[1]


class Signal(logging.Handler):
    """Sets ``seen`` when a record whose message contains ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


async def test_a_renewal_cut_off_while_every_connection_is_busy_is_counted_as_the_pools(
    migrated_database_url: str,
    transact: Callable[[Work, Collection[str]], Awaitable[None]],
) -> None:
    """A renewal that waited a whole lease for a connection of a pool whose connections are all
    held is told from one the database held: ``pool_timeout``, not ``timeout``."""
    held = await claim(transact, EventKey("ada", "held-while-the-pool-is-busy", "0:llm-bot"), 0)
    cut_off = Signal("could not renew claim leases")
    logging.getLogger("llm_bot.db.leases").addHandler(cut_off)
    try:
        async with (
            asyncio.timeout(30),
            AsyncConnectionPool(
                migrated_database_url, min_size=1, max_size=1, kwargs={"autocommit": True}
            ) as pool,
            LeaseKeeper(pool, lease_s=LEASE_S) as keeper,
        ):
            with keeper.holding(held):
                async with pool.connection():  # the pool's only connection, busy
                    await cut_off.seen.wait()
    finally:
        logging.getLogger("llm_bot.db.leases").removeHandler(cut_off)
    assert keeper.failures["pool_timeout"] >= 1, keeper.failures
    assert keeper.failures["timeout"] == 0, keeper.failures


async def test_a_renewal_that_cannot_finish_is_cut_off_after_a_lease_and_its_statement_ends(
    migrated_pool: AsyncConnectionPool[Any],
    transact: Callable[[Work, Collection[str]], Awaitable[None]],
) -> None:
    """A table lock (a migration, an operator's maintenance) holds the renewal's statement,
    which passes over locked rows but not a locked table: it is cut off after a whole lease,
    counted as a timeout, and its statement is cancelled on the server, so the lock's holder
    finds no renewal queued behind it."""
    held = await claim(transact, EventKey("ada", "held-through-a-lock", "0:llm-bot"), wait_s=0)
    cut_off = Signal("could not renew claim leases (timeout)")
    logging.getLogger("llm_bot.db.leases").addHandler(cut_off)
    try:
        async with LeaseKeeper(migrated_pool, lease_s=LEASE_S) as keeper, asyncio.timeout(30):
            with keeper.holding(held):
                async with migrated_pool.connection() as locker, locker.transaction():
                    await locker.execute("LOCK TABLE processed_events IN ACCESS EXCLUSIVE MODE")
                    await cut_off.seen.wait()
                    assert await lock_waiters(locker) == 0
    finally:
        logging.getLogger("llm_bot.db.leases").removeHandler(cut_off)
    assert keeper.failures["timeout"] >= 1
