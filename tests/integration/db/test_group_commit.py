"""Group commit on the real database: grouped, durable on return, failures isolated, retried."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from llm_bot.db.batches import Item, UserRows, Work, chains
from llm_bot.db.group_commit import CommitTimedOut, GroupCommitter, RejectedWrite
from llm_bot.db.placements import ONE_NODE, Placements

from ...support.locks import lock_waiters

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(fresh_database_url: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with AsyncConnectionPool(
        fresh_database_url, min_size=1, max_size=4, kwargs={"autocommit": True}
    ) as opened:
        async with opened.connection() as connection:
            await connection.execute("CREATE TABLE writes (n int PRIMARY KEY)")
        yield opened


def insert(n: int) -> Callable[[AsyncConnection[Any]], Awaitable[None]]:
    async def work(connection: AsyncConnection[Any]) -> None:
        await connection.execute("INSERT INTO writes VALUES (%s)", (n,))

    return work


async def count(url: str) -> int:
    async with await AsyncConnection.connect(url) as connection:
        row = await (await connection.execute("SELECT count(*) FROM writes")).fetchone()
    assert row is not None
    return int(row[0])


async def numbers(url: str) -> list[int]:
    async with await AsyncConnection.connect(url) as connection:
        rows = await (await connection.execute("SELECT n FROM writes ORDER BY n")).fetchall()
    return [row[0] for row in rows]


def update(before: int, after: int) -> Callable[[AsyncConnection[Any]], Awaitable[None]]:
    async def work(connection: AsyncConnection[Any]) -> None:
        await connection.execute("UPDATE writes SET n = %s WHERE n = %s", (after, before))

    return work


@contextlib.asynccontextmanager
async def row_locked(
    pool: AsyncConnectionPool[Any], url: str
) -> AsyncIterator[AsyncConnection[Any]]:
    """Row 1 of ``writes``, locked by another session (yielded) until the block ends."""
    async with pool.connection() as connection:
        await connection.execute("INSERT INTO writes VALUES (1)")
    async with await AsyncConnection.connect(url) as holder:
        await holder.execute("SELECT * FROM writes WHERE n = 1 FOR UPDATE")
        try:
            yield holder
        finally:
            await holder.rollback()


async def test_concurrent_commits_share_transactions_and_are_durable_on_return(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    async with GroupCommitter(pool, max_batch=16, max_delay_s=0.05) as committer:
        await asyncio.gather(*(committer.commit(insert(n), ()) for n in range(64)))
        assert await count(fresh_database_url) == 64
        await committer.commit(insert(1000), ())
        assert await count(fresh_database_url) == 65  # visible to another session at once
    assert committer.committed == 65
    assert committer.transactions < 65 / 2


async def test_one_failing_event_fails_alone(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    async with GroupCommitter(pool, max_batch=8, max_delay_s=0.05) as committer:
        results = await asyncio.gather(
            *(committer.commit(insert(n), ()) for n in (1, 2, 2, 3)), return_exceptions=True
        )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1
    assert isinstance(failures[0], RejectedWrite)
    assert isinstance(failures[0].__cause__, psycopg.errors.UniqueViolation)
    assert await count(fresh_database_url) == 3


async def test_a_statement_error_in_a_batch_of_32_fails_its_event_alone_without_retries(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """A value too large for a btree entry raises ProgramLimitExceeded, an OperationalError by
    class: it is the statement's fault, not the connection's, so nothing is retried."""
    async with pool.connection() as connection:
        await connection.execute("CREATE TABLE labels (label text PRIMARY KEY)")
    attempts = 0

    async def oversized(connection: AsyncConnection[Any]) -> None:
        nonlocal attempts
        attempts += 1
        label = secrets.token_hex(4000)  # 8,000 random characters: incompressible
        await connection.execute("INSERT INTO labels VALUES (%s)", (label,))

    works = [insert(n) for n in range(31)]
    works.insert(17, oversized)
    async with GroupCommitter(pool, max_batch=32, max_delay_s=0.5) as committer:
        results = await asyncio.gather(
            *(committer.commit(work, ()) for work in works), return_exceptions=True
        )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert [type(f) for f in failures] == [RejectedWrite]
    assert isinstance(failures[0].__cause__, psycopg.errors.ProgramLimitExceeded)
    assert "54000" in str(failures[0])
    assert await count(fresh_database_url) == 31
    assert attempts == 2, "one run in the batch, one alone under its savepoint, no retry"


async def test_a_transient_error_retries_the_batch(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    attempts = 0

    async def flaky(connection: AsyncConnection[Any]) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise psycopg.OperationalError("connection dropped")
        await connection.execute("INSERT INTO writes VALUES (7)")

    async with GroupCommitter(pool, max_batch=4, max_delay_s=0.0) as committer:
        await committer.commit(flaky, ())
    assert attempts == 2
    assert await count(fresh_database_url) == 1


async def test_deferred_work_rides_along_with_the_next_commit(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    async with GroupCommitter(pool, max_batch=8, max_delay_s=0.01) as committer:
        committer.defer(insert(1), ())
        await committer.commit(insert(2), ())
        assert await count(fresh_database_url) == 2
        assert committer.transactions == 1


async def test_close_commits_deferred_work_at_once(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    async with GroupCommitter(pool, max_batch=8, max_delay_s=0.01) as committer:
        committer.defer(insert(1), ())
    assert await count(fresh_database_url) == 1


async def test_failed_deferred_work_is_logged_and_fails_nobody_else(
    pool: AsyncConnectionPool[Any], fresh_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with GroupCommitter(pool, max_batch=8, max_delay_s=0.01) as committer:
        committer.defer(insert(1), ())
        committer.defer(insert(1), ())
        await committer.commit(insert(2), ())
    assert await count(fresh_database_url) == 2
    assert "deferred write failed" in caplog.text


async def test_works_sharing_a_key_run_in_order_and_the_rest_interleaved(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """Each ``next_after`` reads the highest row and writes the one after it: interleaved,
    two of them would read the same row and collide; in order they follow each other."""

    async def next_after(connection: AsyncConnection[Any]) -> None:
        cursor = await connection.execute("SELECT coalesce(max(n), 0) FROM writes WHERE n < 100")
        row = await cursor.fetchone()
        assert row is not None
        await connection.execute("INSERT INTO writes VALUES (%s)", (row[0] + 1,))

    async with GroupCommitter(pool, max_batch=16, max_delay_s=0.05) as committer:
        await asyncio.gather(
            *(committer.commit(next_after, ["counter"]) for _ in range(5)),
            *(committer.commit(insert(100 + n), [f"row {n}"]) for n in range(5)),
        )
    assert await count(fresh_database_url) == 10
    assert committer.transactions == 1  # no collision made the batch run again


def test_chains_join_works_through_shared_keys_and_keep_their_order() -> None:
    works = [insert(n) for n in range(5)]
    keys = [["a"], ["b"], ["c", "a"], ["d"], ["b", "c"]]
    batch = [Item(work, key, None) for work, key in zip(works, keys, strict=True)]
    grouped = chains(batch)
    assert sorted(grouped, key=len) == [[works[3]], [works[0], works[1], works[2], works[4]]]


async def test_an_event_alone_commits_without_waiting_for_company(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """An hour's delay: had either commit waited for company, the guard would end the test."""
    async with GroupCommitter(pool, max_batch=16, max_delay_s=3600) as committer:
        async with asyncio.timeout(60):
            with committer.expecting_work():
                await committer.commit(insert(1), ())  # the claim
                await committer.commit(insert(2), ())  # the output
    assert committer.transactions == 2
    assert committer.waits == 0
    assert await count(fresh_database_url) == 2


async def test_a_batch_waits_for_an_event_in_progress_and_goes_when_it_arrived(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    async with GroupCommitter(pool, max_batch=16, max_delay_s=3600) as committer:
        async with asyncio.timeout(60):
            with committer.expecting_work(), committer.expecting_work():
                first = asyncio.create_task(committer.commit(insert(1), ()))
                for _ in range(1000):  # loop turns until the committer took it and waits
                    if committer.waits:
                        break
                    await asyncio.sleep(0)
                assert committer.waits == 1
                assert committer.expects_company()
                await committer.commit(insert(2), ())  # the last one expected: no more wait
                await first
    assert committer.transactions == 1
    assert committer.waits == 1
    assert await count(fresh_database_url) == 2


async def test_without_citus_a_batch_of_many_tenants_is_one_transaction(
    pool: AsyncConnectionPool[Any], fresh_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The shard map of a database without distributed tables is one node, read without a
    complaint, and a batch is one transaction whatever its works' tenants."""
    placements = Placements()
    async with GroupCommitter(pool, max_batch=16, max_delay_s=0.0, placements=placements) as gc:
        works = (gc.commit(insert(n), (UserRows("row", f"user-{n}"),)) for n in range(8))
        await asyncio.gather(*works)
    assert placements.current == ONE_NODE
    assert gc.transactions == 1
    assert await count(fresh_database_url) == 8
    assert not [r for r in caplog.records if r.name == "llm_bot.db.placements"], caplog.text


async def test_a_transaction_that_stalls_fails_its_events_in_bounded_time_and_frees_the_committer(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """A statement waiting on a row lock another session holds never ends by itself (the
    ledger's connections have no statement timeout): each attempt is ended at the commit
    timeout, the waiting statement is cancelled on the server, and once every attempt has
    failed the events get a transient error (they are nacked, not lost). The committer then
    takes the next batch, on a connection that works."""
    async with row_locked(pool, fresh_database_url) as holder:
        async with GroupCommitter(
            pool, max_batch=4, max_delay_s=0.0, attempt_timeout_s=0.2
        ) as committer:
            async with asyncio.timeout(60):
                with pytest.raises(CommitTimedOut):
                    await committer.commit(update(1, 2), ())
                await committer.commit(insert(3), ())
        # while the lock is still held
        assert await lock_waiters(holder) == 0, "a cancelled statement still waits"
    assert await count(fresh_database_url) == 2


async def test_a_work_that_never_finishes_its_statements_fails_in_bounded_time(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """The pipeline's other stall: the server has a statement and waits for the rest of the
    pipeline (its backend reads from the client) while the client waits on something else."""
    stalled = asyncio.Event()

    async def stall(connection: AsyncConnection[Any]) -> None:
        await connection.execute("INSERT INTO writes VALUES (9)")
        stalled.set()
        await asyncio.Event().wait()

    async with GroupCommitter(pool, max_batch=4, max_delay_s=0.0, attempt_timeout_s=0.2) as gc:
        async with asyncio.timeout(60):
            with pytest.raises(CommitTimedOut):
                await gc.commit(stall, ())
            assert stalled.is_set()
            await gc.commit(insert(3), ())
    assert await count(fresh_database_url) == 1


async def test_a_batch_waiting_on_a_lock_holds_only_the_works_that_share_its_keys(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """One user's write waits on a row another session locked (an operator's ``forget``, say):
    another user's write, handed in after it, commits while it still waits; the user's next
    writes, and a write sharing a key with those, wait and then commit in the order they came
    (each update below finds its row only if the one before it committed first)."""
    stalled = asyncio.Event()

    async def stalls(connection: AsyncConnection[Any]) -> None:
        stalled.set()
        await update(1, 2)(connection)

    ada, bob = UserRows("row", "ada"), UserRows("row", "bob")
    async with GroupCommitter(pool, max_batch=8, max_delay_s=0.0, attempt_timeout_s=300) as gc:
        async with row_locked(pool, fresh_database_url) as holder, asyncio.timeout(30):
            first = asyncio.create_task(gc.commit(stalls, [ada]))
            await stalled.wait()
            same_user = asyncio.create_task(gc.commit(update(2, 3), [ada, "job"]))
            same_job = asyncio.create_task(gc.commit(update(3, 4), ["job"]))
            await gc.commit(insert(10), [bob])
            assert not any(task.done() for task in (first, same_user, same_job))
            assert await lock_waiters(holder) == 1
        async with asyncio.timeout(30):  # the lock is gone
            await asyncio.gather(first, same_user, same_job)
    assert await numbers(fresh_database_url) == [4, 10]
    assert gc.overtaken == 1


async def test_a_timed_out_batch_is_tried_again_a_chain_at_a_time_so_its_other_works_commit(
    pool: AsyncConnectionPool[Any], fresh_database_url: str
) -> None:
    """One user's write and another's share a batch, and the first waits on a locked row: once
    the attempt timed out, the other commits on its own while the first still waits, and the
    first commits when the lock goes (it has the attempts left)."""
    sessions: dict[str, list[int]] = {"stalls": [], "other": []}

    def noted(name: str, work: Work) -> Work:
        async def run(connection: AsyncConnection[Any]) -> None:
            sessions[name].append(connection.info.backend_pid)
            await work(connection)

        return run

    ada, bob = UserRows("row", "ada"), UserRows("row", "bob")
    async with GroupCommitter(pool, max_batch=8, max_delay_s=0.0, attempt_timeout_s=1.0) as gc:
        async with row_locked(pool, fresh_database_url), asyncio.timeout(30):
            await gc.commit(insert(5), ())  # the committer now waits for the next work
            first = asyncio.create_task(gc.commit(noted("stalls", update(1, 2)), [ada]))
            await gc.commit(noted("other", insert(10)), [bob])
            assert not first.done()
        async with asyncio.timeout(30):  # the lock is gone
            await first
    assert sessions["other"][0] == sessions["stalls"][0], "the two shared a batch"
    assert len(sessions["other"]) == 2, "the batch's timed-out attempt, then its own"
    assert await numbers(fresh_database_url) == [2, 5, 10]
