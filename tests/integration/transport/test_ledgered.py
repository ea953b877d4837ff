"""Claims held under the processed-events ledger: a release never outwaits its bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.processed_events import Claim, EventKey
from llm_bot.transport.ledgered import Ledgered

from ...support.locks import lock_waiters

pytestmark = pytest.mark.integration


async def test_a_release_the_table_lock_holds_gives_up_and_leaves_the_lease_to_expire(
    migrated_pool: AsyncConnectionPool[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A failed event gives its claim back so a redelivery need not wait the lease out; with
    the ledger's table locked (a migration, maintenance) that release would wait as long as
    the lock, and the event's nack with it. It gives up at its bound, its statement cancelled,
    and the claim stays until its lease ends."""
    async with GroupCommitter(migrated_pool, max_batch=4, max_delay_s=0.0) as committer:
        ledgered = Ledgered(committer.commit, migrated_pool.connection, release_timeout_s=0.2)
        claim = await ledgered.claim(EventKey("ada", "failed", "0:llm-bot"), lease_s=60, wait_s=0)
        assert isinstance(claim, Claim)
        async with migrated_pool.connection() as locker, locker.transaction():
            await locker.execute("LOCK TABLE processed_events IN ACCESS EXCLUSIVE MODE")
            async with asyncio.timeout(30):
                await ledgered.release(claim)
            assert await lock_waiters(locker) == 0, "the release's statement still waits"
        async with migrated_pool.connection() as connection:
            cursor = await connection.execute("SELECT claim_token FROM processed_events")
            assert await cursor.fetchone() == (claim.token,)  # held until its lease ends
    assert "could not release a claim" in caplog.text
