"""Group commit: the write transactions of concurrent events, grouped into one.

Each event hands in its writes as a function of a connection and waits; a single committer
task takes up to ``LLM_BOT_COMMIT_MAX_BATCH`` of them, waiting at most
``LLM_BOT_COMMIT_MAX_DELAY_MS`` for the batch to fill, and runs them in one transaction. An
event's ``commit`` returns only after the transaction holding its writes has committed, so
acking after it is safe. Bookkeeping that nothing waits for (the "published" mark) is
``defer``-red instead: it rides along with the next batch, or goes alone once
``DEFERRED_MAX_WAIT_S`` passed without one, so it costs neither a wait nor, under any load, a
transaction of its own.

The wait for company adapts to the load: it is worth its delay only when company is coming.
Events declare themselves while they are processed (``expecting_work``), so the committer
knows whether any event is in progress that has not handed in its work; with none (an event
alone), a batch goes at once. With some, it waits only while the recent arrival rate makes
another arrival within the delay likely. Under load the queue fills the batch anyway; an
event alone saves the whole delay twice (its claim and its output).

The works of a batch run interleaved on one connection in pipeline mode: each sends its next
statement without waiting for the others' results, so a batch costs about as many round trips
as its longest work has statements, not the sum of all of them (each round trip also waits for
a turn of a busy event loop). Works name the rows they touch by ``keys``; works that share a
key run one after another in the order they came (:mod:`llm_bot.db.batches`).

If one event's work fails (a lost claim, or a statement the database refuses: an id too long
for its index, say), the batch is rolled back and run again with a savepoint per event, so that
failure fails that event alone, at once; a refused statement reaches its event as a
:class:`RejectedWrite`, which dead-letters it. Only failures of the connection or the server
(connection lost, server shutting down, too many connections, deadlock, serialization failure)
retry the whole batch with jittered backoff (tenacity); if they persist, every event of the
batch gets the error and is nacked. So does an attempt that outlasts
``LLM_BOT_COMMIT_TIMEOUT_MS`` (:class:`CommitTimedOut`): the ledger's connections have no
statement timeout, and a transaction waiting on a lock, a node or a pipeline that never answers
would otherwise hold its events for good. Cancelling the attempt cancels its statement on the
server, or closes the connection when the server does not answer, so the pool never hands it
out again. A batch whose attempt timed out is tried again as a transaction per chain, each with
the attempts left: the works that did not wait on what stalled commit then, and only the chain
that waits on it waits again.

On Citus a batch splits into one transaction per set of nodes its works write, committed side
by side (:func:`llm_bot.db.batches.by_node` says how): one node's works commit there alone,
and the works that must write two nodes (a shared channel's, its author's and the channel's)
share one two-phase commit. On plain PostgreSQL there is one node and a batch is one
transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Collection, Hashable, Iterator
from typing import Any, Self

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from llm_bot.db.batches import Item, LockKey, Work, by_node, chains, linked
from llm_bot.db.placements import ONE_NODE, Placements
from llm_bot.errors import DeadLetterError
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics
from llm_bot.telemetry.arrivals import ArrivalRate

logger = logging.getLogger(__name__)

# SQLSTATE classes and codes a later attempt may not meet again: the connection (08), resources
# (53: too many connections, out of memory), the server going away (57P), and a concurrent
# transaction (40001 serialization failure, 40P01 deadlock). Anything else that a statement
# raises (a value too long for an index, a constraint, bad data) is the statement's own.
_TRANSIENT_STATES = ("08", "53", "57P", "40001", "40P01")
ATTEMPTS = 4
DEFERRED_MAX_WAIT_S = 0.5
# Wait for company when at least this many arrivals are expected within the delay (at the
# recent rate): below it, the wait mostly delays the batch in vain. 0.25 keeps waiting at
# 800 ms model / 16 in flight (~0.7 expected in 20 ms), where not waiting doubles the write
# transactions per event (docs/performance.md), and stops at a few events in flight.
MIN_EXPECTED_ARRIVALS = 0.25
# A batch is overtaken (the next one goes beside it) once it has committed for this long: a
# hundred times a batch's usual time, so under load batches still go one at a time and fill.
OVERTAKE_AFTER_S = 0.5


class CommitTimedOut(Exception):
    """One attempt of a batch's transaction outlasted the commit timeout: like a lost
    connection, a later attempt may not meet it again."""


class RejectedWrite(DeadLetterError):
    """The database refused one event's write as such (its data, not the connection): no
    retry can succeed, and the event's batch-mates are not held back by it."""

    kind = "rejected_write"


def is_transient(error: BaseException) -> bool:
    """Whether the failure is the connection's or the server's (retry the whole batch) rather
    than one statement's (fail that statement's event alone)."""
    if isinstance(error, PoolTimeout | CommitTimedOut):
        return True
    if not isinstance(error, psycopg.Error):
        return False
    if error.sqlstate is None:  # raised by the client: the connection broke
        return isinstance(error, psycopg.OperationalError)
    return error.sqlstate.startswith(_TRANSIENT_STATES)


def _own_failure(error: BaseException) -> BaseException:
    """What the event whose work failed is told: a statement error dead-letters it."""
    if isinstance(error, psycopg.Error):
        state = error.sqlstate or "no SQLSTATE"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        rejected = RejectedWrite(f"the database rejected the event's write ({state}: {first_line})")
        rejected.__cause__ = error
        return rejected
    return error


class GroupCommitter:
    """Used as ``async with``: entering starts the committer task, leaving commits what is
    queued and stops it, so no caller can forget either half."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        max_batch: int,
        max_delay_s: float,
        attempt_timeout_s: float = 10.0,
        placements: Placements | None = None,
    ) -> None:
        """``attempt_timeout_s``: the longest one attempt of a batch's transaction may take;
        ``placements``: where tenants' rows are, to split batches by node (none: never)."""
        self._pool = pool
        self._max_batch = max_batch
        self._max_delay_s = max_delay_s
        self._attempt_timeout_s = attempt_timeout_s
        self._placements = placements
        self._pending: deque[Item] = deque()  # handed in, not yet in a batch
        self._changed = asyncio.Event()  # an item was handed in or a batch ended
        self._busy: set[LockKey] = set()  # the keys of the batches committing
        # Batches committing at once: one, and more only as earlier ones are overtaken.
        self._slots = asyncio.Semaphore(max(2, pool.max_size // 2))
        self._unfinished = 0  # items not yet through a batch
        # The runner forms the batches; one whose batch was overtaken ends after it. Held
        # here: the loop keeps only weak references to tasks.
        self._runner: asyncio.Task[None] | None = None
        self._runners: set[asyncio.Task[None]] = set()
        self._refresher: asyncio.Task[None] | None = None
        self._deferred = 0  # deferred items not yet through a batch
        self._in_progress = 0  # events that declared work to come (``expecting_work``)
        self._waited_for = 0  # waited-for items queued or in the batch being filled
        self.arrivals = ArrivalRate()  # of waited-for work
        self.transactions = 0
        self.committed = 0
        self.waits = 0  # batches that waited for company (the rest went at once)
        self.overtaken = 0  # batches still committing after OVERTAKE_AFTER_S

    @classmethod
    def from_settings(cls, pool: AsyncConnectionPool[Any], settings: Settings) -> GroupCommitter:
        """The worker's committer: on Citus, a transaction per node, from the shard map it
        reads at start and keeps current."""
        return cls(
            pool,
            max_batch=settings.commit_max_batch,
            max_delay_s=settings.commit_max_delay_ms / 1000,
            attempt_timeout_s=settings.commit_timeout_ms / 1000,
            placements=Placements(),
        )

    @property
    def placements(self) -> Placements | None:
        """The shard map the committer keeps current, for others that group by it."""
        return self._placements

    async def __aenter__(self) -> Self:
        if self._placements is not None:
            await self._placements.load(self._pool)
            keeping = self._placements.keep_current(self._pool)
            self._refresher = asyncio.create_task(keeping, name="shard-map")
        self._start_runner()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit what is queued (deferred work too, at once), then stop; again, nothing."""
        if self._runner is None:
            return
        if self._deferred:
            await self.commit(_nothing, ())  # a waited-for item does not let deferred work linger
        while self._unfinished:
            await self._change()
        tasks = [*self._runners, *([self._refresher] if self._refresher else [])]
        self._runner = self._refresher = None
        for each in tasks:
            each.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await each

    async def commit(self, work: Work, keys: Collection[LockKey]) -> None:
        """Run ``work`` in a (shared) transaction; returns once that transaction committed.
        ``keys`` name what it reads and writes (a thread, a user, an event): works of a batch
        with a key in common run in order, the rest interleaved; on Citus, its transaction is
        the nodes of the rows they name (:func:`llm_bot.db.batches.tenants_of`)."""
        if self._runner is None:
            raise RuntimeError("group committer not started")
        loop = asyncio.get_running_loop()
        self.arrivals.note(loop.time())
        done: asyncio.Future[None] = loop.create_future()
        self._waited_for += 1
        self._hand_in(Item(work, keys, done))
        await done

    @contextlib.contextmanager
    def expecting_work(self) -> Iterator[None]:
        """Around an event that will hand in work (its claim, then its output): while some
        event in progress has not handed its work in, a batch may wait for it; once every one
        has, nobody else is coming and the batch goes at once."""
        self._in_progress += 1
        try:
            yield
        finally:
            self._in_progress -= 1

    def expects_company(self) -> bool:
        """Whether a batch holding waited-for work should wait for more: some declared event
        has not handed its work in yet, and at the recent rate one arrives within the delay."""
        if self._in_progress <= self._waited_for:
            return False
        return self.arrivals.expected_within(self._max_delay_s) >= MIN_EXPECTED_ARRIVALS

    def defer(self, work: Work, keys: Collection[LockKey]) -> None:
        """Queue ``work`` for a coming transaction (of the nodes of the rows ``keys`` name)
        without waiting for it; a failure is logged (deferred work must be safe to lose, as
        after a crash)."""
        if self._runner is None:
            raise RuntimeError("group committer not started")
        self._deferred += 1
        self._hand_in(Item(work, keys, None))

    def _hand_in(self, item: Item) -> None:
        self._pending.append(item)
        self._unfinished += 1
        self._changed.set()

    def shard_of(self, tenant: str) -> Hashable:
        """``tenant``'s shard, for work that writes several tenants' rows in one statement
        (it stays single-shard by grouping them by this); one value on plain PostgreSQL."""
        return None if self._placements is None else self._placements.current.shard_of(tenant)

    def _start_runner(self) -> None:
        """A runner that forms the batches from now on (the one before, if any, ends after the
        batch it commits)."""
        task = asyncio.create_task(self._run(), name="group-commit")
        self._runners.add(task)
        task.add_done_callback(self._runners.discard)
        self._runner = task

    def _overtake(self) -> None:
        self.overtaken += 1
        self._start_runner()

    async def _run(self) -> None:
        """Batches one at a time, each committed in this task, so that the next batch is formed
        (and sent) before the events its commit woke up run. A batch still committing after
        ``OVERTAKE_AFTER_S`` starts another runner; this one ends when that batch does."""
        loop = asyncio.get_running_loop()
        this = asyncio.current_task()
        while self._runner is this:
            async with self._slots:  # from forming the batch until it committed
                batch = await self._next_batch()
                keys = {key for item in batch for key in item.keys}
                self._busy |= keys
                overtaking = loop.call_later(OVERTAKE_AFTER_S, self._overtake)
                try:
                    await self._commit_parts(batch, keys)
                finally:
                    overtaking.cancel()

    async def _commit_parts(self, batch: list[Item], keys: set[LockKey]) -> None:
        """``batch`` committed, a transaction per set of nodes; then its keys free."""
        try:
            shard_map = ONE_NODE if self._placements is None else self._placements.current
            await asyncio.gather(*(self._commit_batch(part) for part in by_node(batch, shard_map)))
        finally:
            self._busy -= keys
            self._unfinished -= len(batch)
            self._changed.set()

    async def _next_batch(self) -> list[Item]:
        """Everything already handed in (up to the batch size) goes at once; only when nothing
        is, the committer waits, until the delay is up. (Waiting takes a turn of the event
        loop, and a busy loop's turns outlast the delay: waiting for items that are already
        there would send batches of one or two while the queue grows.) Deferred work alone
        waits longer, for company that someone waits on. A batch with waited-for work waits
        only while company is expected (:meth:`expects_company`), asked again after each
        arrival."""
        batch: list[Item] = []
        while not self._take(batch):
            await self._change()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(self._wait_for(item) for item in batch)
        waited = False
        while len(batch) < self._max_batch:
            left = deadline - loop.time()
            waited_for = any(item.done is not None for item in batch)
            if left <= 0 or (waited_for and not self.expects_company()):
                break
            if not waited:
                waited = True
                self.waits += 1
            try:
                async with asyncio.timeout(left):
                    await self._change()
            except TimeoutError:
                break
            now = loop.time()
            for item in self._take(batch):
                deadline = min(deadline, now + self._wait_for(item))
        return batch

    def _take(self, batch: list[Item]) -> list[Item]:
        """Moves into ``batch`` the handed-in items it may take, in order, up to the batch
        size, and returns them: each that shares no key with a batch committing, nor with an
        item before it that stays (which must commit first)."""
        room = self._max_batch - len(batch)
        if not self._pending or room <= 0:
            return []
        blocked = set(self._busy)
        taken: list[Item] = []
        kept: deque[Item] = deque()
        pending = self._pending
        while pending and len(taken) < room:
            item = pending.popleft()
            if blocked.isdisjoint(item.keys):
                taken.append(item)
            else:
                kept.append(item)
                blocked.update(item.keys)
        kept.extend(pending)
        self._pending = kept
        batch.extend(taken)
        return taken

    async def _change(self) -> None:
        """Until an item is handed in or a batch ends."""
        self._changed.clear()
        await self._changed.wait()

    def _wait_for(self, item: Item) -> float:
        """How long ``item`` may wait for the batch to fill."""
        return self._max_delay_s if item.done is not None else DEFERRED_MAX_WAIT_S

    async def _commit_batch(self, batch: list[Item], attempts: int = ATTEMPTS) -> None:
        """``batch`` in one transaction, tried up to ``attempts`` times. An attempt that timed
        out splits a batch of several chains: each chain is then a transaction of its own with
        the attempts left, so the chains that do not wait on what stalled commit at once."""
        failures: dict[int, BaseException] = {}
        split: list[list[int]] = []
        tried = 0
        # Not ``batch`` itself: tenacity's retrying object refers to itself, so what its
        # predicate holds lives until the cyclic collector runs, and a batch holds its events'
        # rows and answers.
        several_chains = len(linked(batch)) > 1

        def retried(error: BaseException) -> bool:
            if isinstance(error, CommitTimedOut) and several_chains:
                return False  # split instead
            return is_transient(error)

        with metrics.timed(metrics.commit_duration):
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception(retried),
                    wait=wait_random_exponential(multiplier=0.1, max=2),
                    stop=stop_after_attempt(attempts),
                    before_sleep=lambda _: metrics.retries.add(1, {"dependency": "database"}),
                    reraise=True,
                ):
                    with attempt:
                        tried += 1
                        failures = await self._bounded_transaction(batch)
            except Exception as error:  # the batch could not be committed
                timed_out = isinstance(error, CommitTimedOut) and tried < attempts
                split = linked(batch) if timed_out else []
                if len(split) <= 1:  # every event nacks
                    logger.warning("group commit failed: %s", type(error).__name__)
                    failures = {index: error for index in range(len(batch))}
        if len(split) > 1:
            parts = ([batch[index] for index in chain] for chain in split)
            await asyncio.gather(*(self._commit_batch(part, attempts - tried) for part in parts))
            return
        self.transactions += 1
        self.committed += len(batch) - len(failures)
        metrics.commit_batch_size.record(len(batch))
        for index, item in enumerate(batch):
            done = item.done
            if done is None:
                self._deferred -= 1
                if index in failures:
                    logger.warning("deferred write failed: %s", failures[index])
                continue
            self._waited_for -= 1
            if done.done():
                continue
            if index in failures:
                done.set_exception(failures[index])
            else:
                done.set_result(None)

    async def _bounded_transaction(self, batch: list[Item]) -> dict[int, BaseException]:
        try:
            async with asyncio.timeout(self._attempt_timeout_s):
                return await self._transaction(batch)
        except TimeoutError as error:
            limit = f"{self._attempt_timeout_s:g} s (LLM_BOT_COMMIT_TIMEOUT_MS)"
            raise CommitTimedOut(f"the transaction took over {limit}") from error

    async def _transaction(self, batch: list[Item]) -> dict[int, BaseException]:
        """The batch in one transaction; a failure that is the work's own (not the database's)
        rolls it back and reruns it with a savepoint per event, so only that event fails.
        Savepoints cost two round trips per event, so the common, failure-free batch runs
        without them."""
        async with self._pool.connection() as connection:
            try:
                async with connection.pipeline(), connection.transaction():
                    results = await asyncio.gather(
                        *(_in_order(connection, chain) for chain in chains(batch)),
                        return_exceptions=True,  # every work is done before the rollback
                    )
                    for result in results:
                        if isinstance(result, BaseException):
                            raise result
            except Exception as error:
                if is_transient(error):
                    raise
                if len(batch) == 1:
                    return {0: _own_failure(error)}
                return await self._isolated(connection, batch)
        return {}

    @staticmethod
    async def _isolated(
        connection: AsyncConnection[Any], batch: list[Item]
    ) -> dict[int, BaseException]:
        failures: dict[int, BaseException] = {}
        async with connection.transaction():
            for index, item in enumerate(batch):
                try:
                    async with connection.transaction():  # a savepoint per event
                        await item.work(connection)
                except Exception as error:
                    if is_transient(error):
                        raise
                    failures[index] = _own_failure(error)
        return failures


async def _in_order(connection: AsyncConnection[Any], works: list[Work]) -> None:
    for work in works:
        await work(connection)


async def _nothing(connection: AsyncConnection[Any]) -> None:
    """The work of the flush that ``close`` waits on."""
