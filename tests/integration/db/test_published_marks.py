"""The "published" marks: the keys confirmed until the deferred write runs share its one statement,
and a batch that is rolled back and rerun still marks them all."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any

import pytest
from psycopg import AsyncConnection

from llm_bot.db.batches import Work
from llm_bot.db.group_commit import GroupCommitter, RejectedWrite
from llm_bot.db.processed_events import (
    Claim,
    EventKey,
    PublishedMarks,
    StoredOutput,
    store_output,
    try_claim,
)

from ..conftest import running_committer

pytestmark = pytest.mark.integration
OUTPUT = StoredOutput("internal.egress.v1", b"{}", {}, "", "OK")


@pytest.fixture
async def committer(migrated_database_url: str) -> AsyncIterator[GroupCommitter]:
    async with running_committer(migrated_database_url, max_batch=16, max_delay_s=0.01) as group:
        yield group


async def stored_keys(url: str, count: int) -> list[EventKey]:
    """Keys of events whose outputs are stored, as after a commit, not yet marked published."""
    keys = [EventKey(f"user-{n}", f"e{n}", "0:llm-bot") for n in range(count)]
    async with await AsyncConnection.connect(url, autocommit=True) as connection:
        for key in keys:
            claim = await try_claim(connection, key, lease_s=60)
            assert isinstance(claim, Claim)
            await store_output(connection, claim, OUTPUT)
    return keys


async def published(url: str) -> set[str]:
    async with await AsyncConnection.connect(url) as connection:
        cursor = await connection.execute(
            "SELECT correlation_id FROM processed_events WHERE published"
        )
        return {row[0] for row in await cursor.fetchall()}


async def nothing(connection: AsyncConnection[Any]) -> None:
    return None


async def test_keys_confirmed_before_the_write_runs_share_it(
    committer: GroupCommitter, migrated_database_url: str
) -> None:
    keys = await stored_keys(migrated_database_url, 4)
    deferred: list[Work] = []

    def defer(work: Work, order_keys: Collection[str]) -> None:
        deferred.append(work)
        committer.defer(work, order_keys)

    marks = PublishedMarks(defer)
    for key in keys[:3]:
        marks.add(key)
    assert len(deferred) == 1
    await committer.commit(nothing, ())  # the deferred write rides along
    assert await published(migrated_database_url) == {key.correlation_id for key in keys[:3]}

    marks.add(keys[3])  # after the write ran: a write of its own
    assert len(deferred) == 2
    await committer.close()
    assert await published(migrated_database_url) == {key.correlation_id for key in keys}


async def test_a_batch_rerun_after_another_works_failure_still_marks_every_key(
    committer: GroupCommitter, migrated_database_url: str
) -> None:
    keys = await stored_keys(migrated_database_url, 3)
    marks = PublishedMarks(committer.defer)
    for key in keys:
        marks.add(key)

    async def failing(connection: AsyncConnection[Any]) -> None:
        await connection.execute("SELECT 1/0")

    with pytest.raises(RejectedWrite, match="22012: division by zero"):
        await committer.commit(failing, ())  # same batch: rolled back, rerun with savepoints
    await committer.commit(nothing, ())
    assert await published(migrated_database_url) == {key.correlation_id for key in keys}
