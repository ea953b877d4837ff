"""The effectively-once record: one row per (user, correlation id, routing step) holding its
output.

Pub/Sub delivers at least once and many instances share the subscription, so before the graph
runs an event its row is *claimed* (``INSERT ... ON CONFLICT`` with a lease). The row then stores
the exact bytes to publish, and ``published`` once Pub/Sub confirmed them. Another delivery of
the same event finds the row and:

- published: nothing to do, ack;
- stored but unpublished, lease expired (its holder crashed between store and publish): take
  the claim and publish the stored bytes again, without a second model call;
- claimed under a live lease (another instance is on it right now): wait for that holder;
- claimed under an expired lease with nothing stored (its holder died): take over and process.

Leases are short and renewed by their live holder (:mod:`llm_bot.db.leases`); a holder that
fails gives its claim up at once (:func:`release`), and every claim is counted (``attempts``),
so an event that keeps failing is given up instead of claimed forever. Every claim carries a
fresh token and the store names it, so a holder whose lease expired and was taken over cannot
write over the new holder's result. :func:`store_output` takes a
connection (the caller's transaction) so the event's other writes can commit with it.

Each statement here is one an event would otherwise spend a round trip and a parse on: a claim
carries the "published" marks gathered since the last one (:class:`PublishedMarks`), and the
store takes the embedding space's write guard for the memory writes of its transaction.

Every statement names the rows' users (the tenant, first in the key: docs/citus.md, "The shard
key"), so on Citus each goes to the shards of those users only, a redelivery lands on its
first delivery's shard, and one event's record is one shard's. Times are the worker's clock
(``now``, a parameter), never the database's inside the statement: Citus refuses volatile
functions in ``ON CONFLICT`` and ``UPDATE``, and the leases compare with the same clock that
set them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from psycopg import AsyncConnection
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from llm_bot.clock import utc_now
from llm_bot.db.batches import LockKey, UserRows, Work
from llm_bot.db.embedding_space import SPACE_LOCK_ID, EmbeddingSpace, space_of
from llm_bot.db.placements import tenant_of_thread
from llm_bot.errors import RetryLaterError
from llm_bot.events.inbound import EventKey
from llm_bot.events.models import Outcome

POLL_INTERVAL_S = 0.2

AnyConnection = AsyncConnection[Any]
# Runs a piece of work, touching what the keys name, in a transaction and returns once that
# transaction has committed.
Transact = Callable[[Work, Collection[LockKey]], Awaitable[None]]


class ClaimLost(RetryLaterError):
    """Our lease expired and another holder took the event over: its result wins."""


class ClaimBusy(RetryLaterError):
    """Another holder kept the event longer than any lease allows; try again later."""


@dataclass(frozen=True)
class StoredOutput:
    """Exactly what goes on the bus for this event, so a re-publication is byte-identical."""

    topic: str
    data: bytes
    attributes: Mapping[str, str]
    ordering_key: str
    outcome: Outcome
    # Which conversation: forgetting a thread finds the record by it (llm_bot/lifecycle); the
    # user is the record's key.
    thread_id: str | None = None


@dataclass(frozen=True)
class Claim:
    """We hold the event; ``stored`` is set when a previous holder left an unpublished output;
    ``attempt`` counts the claims of this event so far, this one included."""

    key: EventKey
    token: UUID
    stored: StoredOutput | None
    attempt: int = 1


@dataclass(frozen=True)
class Published:
    """The event's output was already confirmed on the bus."""

    key: EventKey


@dataclass(frozen=True)
class Held:
    """Another holder has the event: done and confirmed (``published``), or with a lease
    ending in ``lease_left_s``."""

    published: bool
    lease_left_s: float


def thread_key(thread_id: str, correlation_id: str, step: str) -> EventKey:
    """The record of work done for a whole thread (a consolidation job), in the thread row's
    tenant's rows: a DM's user's, a shared channel's own."""
    return EventKey(tenant_of_thread(thread_id), correlation_id, step)


def row_key(key: EventKey) -> UserRows:
    """The event's row, as the group committer's keys name it."""
    return UserRows(("processed_events", key.correlation_id, key.step), key.user_id)


_CLAIM = """
INSERT INTO processed_events AS p (user_id, correlation_id, step_key, claim_token, lease_until,
                                   attempts, claimed_at)
VALUES (%(user_id)s, %(correlation_id)s, %(step)s, %(token)s, %(lease_until)s, 1, %(now)s)
ON CONFLICT (user_id, correlation_id, step_key) DO UPDATE
   SET claim_token = EXCLUDED.claim_token, lease_until = EXCLUDED.lease_until,
       attempts = p.attempts + 1
 WHERE NOT p.published AND p.lease_until < %(now)s
RETURNING p.outcome, p.output_topic, p.output_data, p.output_attributes, p.ordering_key,
          p.attempts
"""

_STATE = """
SELECT published, greatest(0, extract(epoch FROM lease_until - %(now)s))::float8
  FROM processed_events
 WHERE user_id = %(user_id)s AND correlation_id = %(correlation_id)s AND step_key = %(step)s
"""

# The output, the embedding space under its write guard and the answer's explanation
# (migrations 0019 and 0020 say why a function): stored or not, then the space's columns.
_STORE = f"""
SELECT * FROM store_event_output({SPACE_LOCK_ID}, %(user_id)s, %(correlation_id)s, %(step)s,
                                 %(token)s, %(outcome)s, %(topic)s, %(data)s, %(attributes)s,
                                 %(ordering_key)s, %(thread_id)s, %(now)s,
                                 %(explanation)s::jsonb)
"""  # noqa: S608 (constants only)

# Whoever confirmed a publish may record it, even if its lease was taken over meanwhile. The
# users' list, besides the join, is what Citus prunes the shards by.
_MARK_PUBLISHED = """
UPDATE processed_events AS p
   SET published = true, published_at = %(published_at)s, claim_token = NULL
  FROM unnest(%(user_ids)s::text[], %(correlation_ids)s::text[], %(steps)s::text[])
       AS k(user_id, correlation_id, step_key)
 WHERE p.user_id = ANY(%(user_ids)s::text[])
   AND p.user_id = k.user_id AND p.correlation_id = k.correlation_id AND p.step_key = k.step_key
   AND p.output_data IS NOT NULL
"""

# A claim that also marks other events published: one statement where there were two.
_MARK_AND_CLAIM = f"WITH marked AS ({_MARK_PUBLISHED}) {_CLAIM}"

# The row stays (its attempt count with it); only the lease ends, so a redelivery claims at once.
_RELEASE = """
UPDATE processed_events SET claim_token = NULL, lease_until = %(now)s
 WHERE user_id = %(user_id)s AND correlation_id = %(correlation_id)s AND step_key = %(step)s
   AND claim_token = %(token)s
"""

# The claims' users narrow the statement to their shards (a token alone names no shard). The
# rows are locked first, skipping those another transaction holds (:func:`renew` says why),
# and only the rows locked are updated, so the statement never waits on a row lock.
_RENEW = """
UPDATE processed_events AS p SET lease_until = %(lease_until)s
  FROM (SELECT user_id, correlation_id, step_key FROM processed_events
         WHERE user_id = ANY(%(user_ids)s::text[]) AND claim_token = ANY(%(tokens)s::uuid[])
           AND NOT published
           FOR UPDATE SKIP LOCKED) AS held
 WHERE p.user_id = ANY(%(user_ids)s::text[])
   AND p.user_id = held.user_id AND p.correlation_id = held.correlation_id
   AND p.step_key = held.step_key
"""


def key_params(key: EventKey) -> dict[str, Any]:
    return {"user_id": key.user_id, "correlation_id": key.correlation_id, "step": key.step}


def _lease_until(now: datetime, lease_s: float) -> datetime:
    return now + timedelta(seconds=lease_s)


def _marks_params(keys: Collection[EventKey]) -> dict[str, Any]:
    return {
        "user_ids": [key.user_id for key in keys],
        "correlation_ids": [key.correlation_id for key in keys],
        "steps": [key.step for key in keys],
        "published_at": utc_now(),
    }


async def try_claim(
    connection: AnyConnection, key: EventKey, lease_s: float, marks: Collection[EventKey] = ()
) -> Claim | Held:
    """Claim ``key`` for ``lease_s`` inside the caller's transaction, or say who holds it;
    the same statement marks the events ``marks`` names published (never ``key``: a statement
    cannot change one row twice)."""
    token = uuid4()
    now = utc_now()
    params = {
        **key_params(key),
        "token": token,
        "now": now,
        "lease_until": _lease_until(now, lease_s),
    }
    sql = _CLAIM
    if marks:
        if key in marks:
            raise ValueError("a claim cannot mark its own event published")
        params |= _marks_params(marks)
        sql = _MARK_AND_CLAIM
    row = await (await connection.execute(sql, params)).fetchone()
    if row is not None:
        outcome, topic, data, attributes, ordering_key, attempt = row
        stored = None
        if data is not None:
            stored = StoredOutput(topic, bytes(data), dict(attributes), ordering_key, outcome)
        return Claim(key, token, stored, attempt)
    state = await (await connection.execute(_STATE, {**key_params(key), "now": now})).fetchone()
    if state is None:  # released between our two statements: claim again at once
        return Held(published=False, lease_left_s=0.0)
    return Held(published=bool(state[0]), lease_left_s=float(state[1]))


async def claim_or_wait(
    transact: Transact,
    key: EventKey,
    *,
    lease_s: float,
    wait_s: float,
    marks: PublishedMarks | None = None,
) -> Claim | Published:
    """Claim ``key`` for ``lease_s``, waiting up to ``wait_s`` while another holder's lease is
    live; each attempt carries the marks gathered by ``marks`` (:meth:`PublishedMarks.take`).

    ``transact`` runs each attempt in a transaction that has committed when it returns: the
    worker's group committer, so that claims of events arriving together share one.
    Waiting (rather than nacking) keeps a duplicate from bouncing through Pub/Sub's redelivery
    and burning delivery attempts while the first copy is still being answered. A live holder
    renews its lease (:class:`llm_bot.db.leases.LeaseKeeper`) until it is done, within the
    event's deadline, which ``wait_s`` covers; a dead one stops renewing, and its lease ends
    within ``lease_s``, so the event is taken over in seconds.
    """
    give_up_at = time.monotonic() + wait_s + POLL_INTERVAL_S
    while True:
        marked = marks.take(but=key) if marks is not None else []
        state = await _claim_once(transact, key, lease_s, marked)
        if isinstance(state, Claim):
            return state
        if state.published:
            return Published(key)
        if time.monotonic() >= give_up_at:
            raise ClaimBusy(f"event {key.correlation_id} is still held by another instance")
        await asyncio.sleep(min(POLL_INTERVAL_S, state.lease_left_s))


async def _claim_once(
    transact: Transact, key: EventKey, lease_s: float, marks: list[EventKey]
) -> Claim | Held:
    claimed: list[Claim | Held] = []

    async def attempt(connection: AnyConnection) -> None:
        # A retried batch redoes it, with the same marks.
        claimed[:] = [await try_claim(connection, key, lease_s, marks)]

    await transact(attempt, (row_key(key),))
    return claimed[0]


async def store_output(
    connection: AnyConnection,
    claim: Claim,
    output: StoredOutput,
    explanation: Mapping[str, Any] | None = None,
) -> EmbeddingSpace | None:
    """Record the event's output inside the caller's transaction; raises :class:`ClaimLost`.

    The same statement takes the embedding space's write guard and returns the space (None
    when no model is recorded: a ledger without memory), which the event's memory writes in
    this transaction need (:mod:`llm_bot.db.embedding_space`), and stores the answer's
    ``explanation`` (:mod:`llm_bot.explanation`; None: none), so an answered event spends no
    statement of its own on it."""
    params = {
        **key_params(claim.key),
        "token": claim.token,
        "outcome": output.outcome,
        "topic": output.topic,
        "data": output.data,
        "attributes": Jsonb(dict(output.attributes)),
        "ordering_key": output.ordering_key,
        "thread_id": output.thread_id,
        "now": utc_now(),
        "explanation": None if explanation is None else Jsonb(explanation, dumps=_compact),
    }
    # A fetched row, not ``rowcount``: in pipeline mode (the group commit) that is only known
    # once the result has been fetched.
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_STORE, params)
        row = await cursor.fetchone()
    if row is None or not row[0]:
        raise ClaimLost(f"event {claim.key.correlation_id} was taken over by another instance")
    return None if row[1] is None else space_of(row[1:])


def _compact(value: Any) -> str:
    """JSON without the spaces after separators: the explanation is stored once per event."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def mark_published(connection: AnyConnection, keys: Collection[EventKey]) -> None:
    await connection.execute(_MARK_PUBLISHED, _marks_params(keys))


class PublishedMarks:
    """The "published" marks of confirmed outputs, many rows per statement.

    Nothing waits for a mark (see the handler), so it is deferred to a coming transaction, and
    the keys confirmed until that transaction runs share its one statement, instead of a
    statement per event; a claim made meanwhile takes them into its own statement
    (:meth:`take`), and the deferred write marks what is left, if anything. A mark names no
    keys for the committer's ordering: a copy of the event claimed in the same transaction
    ends as a duplicate whether it runs before the mark (it then waits a poll interval) or
    after it."""

    def __init__(self, defer: Callable[[Work, Collection[LockKey]], None]) -> None:
        self._defer = defer
        self._gathering: list[EventKey] | None = None

    def add(self, key: EventKey) -> None:
        if self._gathering is None:
            keys: list[EventKey] = []
            self._gathering = keys

            async def write(connection: AnyConnection) -> None:
                if self._gathering is keys:  # keys confirmed from now on go to the next write
                    self._gathering = None
                if keys:  # the same keys if the batch is rerun
                    await mark_published(connection, keys)

            self._defer(write, ())
        self._gathering.append(key)

    def take(self, but: EventKey) -> list[EventKey]:
        """The keys gathered for the deferred write that has not run yet, but ``but``, for a
        claim's statement to mark instead; the write keeps the rest."""
        gathering = self._gathering
        if gathering is None:
            return []
        taken = [key for key in gathering if key != but]
        gathering[:] = [key for key in gathering if key == but]
        return taken


async def release(connection: AnyConnection, claim: Claim) -> None:
    """Give the event up (it failed here), so a redelivery can claim it at once rather than
    wait out the lease: to process it, or to publish the output stored before the failure."""
    params = {**key_params(claim.key), "token": claim.token, "now": utc_now()}
    await connection.execute(_RELEASE, params)


async def renew(connection: AnyConnection, claims: Collection[Claim], lease_s: float) -> None:
    """Extend the leases of ``claims`` by ``lease_s`` from now, in one statement, but of those
    whose row another transaction holds locked at that moment.

    The statement never waits on a row lock, so it can close no deadlock. Renewal shares its
    rows with the group committer, whose transaction locks them one work at a time, in the
    order its works came and interleaved in a pipeline (a stored output, a claim carrying
    "published" marks), and holds them to its commit; a renewal that locked the rows in its
    own order would wait on the committer while holding a row the committer then waits on, and
    PostgreSQL would abort one of the two. No order can be shared with works that lock as they
    run, short of a statement locking each batch's rows ahead, a round trip on every event's
    path. Skipping costs nothing instead: a row held by a writer is an event being stored,
    marked or claimed right now, its holder alive, and the lease outlasts three more
    heartbeats (:data:`llm_bot.db.leases.HEARTBEATS_PER_LEASE`).

    On Citus the statement writes the shard of every user it names: the caller gives it the
    claims of one shard (:class:`llm_bot.db.leases.LeaseKeeper`), so it goes to that shard
    whole (a row lock is taken on one shard's rows only) and commits there alone, without
    two-phase commit."""
    params = {
        "user_ids": sorted({claim.key.user_id for claim in claims}),
        "tokens": [claim.token for claim in claims],
        "lease_until": _lease_until(utc_now(), lease_s),
    }
    await connection.execute(_RENEW, params)
