"""Settling a message: one context manager around its handling, the only caller of the
decision (:func:`llm_bot.transport.decision.decide`), enacting it once the handling ended.

What happened is an exception the handling raised, the answer the handler reported
(:meth:`Settling.report`: the handler forwards it when the decision is ``FORWARD``), or else the
output on the bus (``Mark.PUBLISHED``). The decision then maps to one action:

- ``ACK`` or ``FORWARD``: the output is committed and on the bus, so ack;
- ``DEAD_LETTER`` (invalid input, a slip that cannot be followed, attempts abandoned): publish a
  ``router.deadletter.v1`` event carrying the original (:mod:`llm_bot.events.deadletter`) to the
  dead-letter topic, with the reason also in attributes, then ack;
- ``NACK`` (a database that did not answer, an unconfirmed publish, a retryable step failure
  with attempts left, a bug): nack, so Pub/Sub delivers again.

Before a nack the message is held for a jittered backoff that grows with the delivery attempt:
Pub/Sub redelivers a nack at once unless the subscription has a retry policy (the emulator
ignores one), and an outage must not burn every delivery attempt in a second.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Protocol

import psycopg

from llm_bot.errors import DeadLetterError, RetryLaterError
from llm_bot.events.limits import MAX_ATTRIBUTE_BYTES, MAX_ATTRIBUTES
from llm_bot.events.models import SOURCE
from llm_bot.transport.decision import Answered, Decision, HandlingResult, Mark, decide
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)

RETRY_BASE_DELAY_S = 0.5
RETRY_MAX_DELAY_S = 8.0
_JITTER = random.Random()  # noqa: S311 - backoff jitter, not security


class Delivery(Protocol):
    """One received message, as the handler sees it, whatever the transport."""

    @property
    def data(self) -> bytes: ...
    @property
    def attributes(self) -> Mapping[str, str]: ...
    @property
    def message_id(self) -> str: ...
    @property
    def delivery_attempt(self) -> int: ...
    @property
    def publish_time(self) -> datetime: ...

    async def ack(self) -> None: ...
    async def nack(self) -> None: ...


# Failures we expect from time to time: logged in one line, without a traceback.
EXPECTED_RETRIES = (RetryLaterError, psycopg.OperationalError)


DeadLetter = Callable[[Delivery, DeadLetterError], Awaitable[None]]


def retry_delay_s(delivery_attempt: int, rng: random.Random | None = None) -> float:
    """Half fixed, half random, doubling per attempt up to ``RETRY_MAX_DELAY_S``."""
    ceiling = min(RETRY_MAX_DELAY_S, RETRY_BASE_DELAY_S * 2.0 ** max(0, delivery_attempt - 1))
    return ceiling / 2 + (rng or _JITTER).uniform(0, ceiling / 2)


def dead_letter_attributes(delivery: Delivery, reason: str, at: str) -> dict[str, str]:
    """The original attributes plus why and when, so the record can be traced and replayed;
    within Pub/Sub's limits, or the dead letter itself could never be published."""
    ours = {
        "deadLetterReason": clipped(reason, MAX_ATTRIBUTE_BYTES),
        "deadLetterSource": SOURCE,
        "deadLetterAt": at,
        "originalMessageId": delivery.message_id,
        "deliveryAttempt": str(delivery.delivery_attempt),
    }
    theirs = [(k, v) for k, v in delivery.attributes.items() if k not in ours]
    return {**dict(theirs[: MAX_ATTRIBUTES - len(ours)]), **ours}


def clipped(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, on a character boundary; characters
    that UTF-8 cannot carry (lone surrogates) become ``?``."""
    return text.encode("utf-8", "replace")[:max_bytes].decode("utf-8", "ignore")


class Settling:
    """What happened to one message, and the decision on it."""

    def __init__(self) -> None:
        self.outcome: HandlingResult = Mark.PUBLISHED  # a block that ends cleanly ends on the bus
        self.decision = Decision.ACK

    def report(self, outcome: HandlingResult) -> Decision:
        self.outcome, self.decision = outcome, decide(outcome)
        return self.decision


@asynccontextmanager
async def settle(
    delivery: Delivery, dead_letter: DeadLetter, stats: WorkerStats
) -> AsyncIterator[Settling]:
    """Ack, dead-letter or nack ``delivery`` by the decision on what happened in the block."""
    settling = Settling()
    try:
        yield settling
    except asyncio.CancelledError:  # shutdown: hand the message back, unfinished
        stats.nacked += 1
        await delivery.nack()
        raise
    except Exception as error:
        settling.report(error)
    decision, outcome = settling.decision, settling.outcome
    if decision is Decision.DEAD_LETTER and isinstance(outcome, DeadLetterError):
        await _dead_letter_or_retry(delivery, outcome, dead_letter, stats)
    elif decision is Decision.NACK:
        _log_retry(delivery, outcome)
        await _nack_after_backoff(delivery, stats)
    else:  # ACK, or FORWARD done: the output is on the bus
        stats.acked += 1
        await delivery.ack()


async def _dead_letter_or_retry(
    delivery: Delivery, error: DeadLetterError, dead_letter: DeadLetter, stats: WorkerStats
) -> None:
    logger.warning(
        "event dead-lettered",
        extra={
            "messageId": delivery.message_id,
            "kind": error.kind,
            "reason": clipped(str(error), MAX_ATTRIBUTE_BYTES),
        },
    )
    try:
        await dead_letter(delivery, error)
    except Exception as error:
        _log_retry(delivery, error)
        await _nack_after_backoff(delivery, stats)
        return
    stats.dead_lettered += 1
    await delivery.ack()


async def _nack_after_backoff(delivery: Delivery, stats: WorkerStats) -> None:
    stats.nacked += 1
    try:
        await asyncio.sleep(retry_delay_s(delivery.delivery_attempt))
    finally:  # also when shutdown cuts the backoff short
        await delivery.nack()


def _log_retry(delivery: Delivery, outcome: HandlingResult) -> None:
    extra = {"messageId": delivery.message_id, "deliveryAttempt": delivery.delivery_attempt}
    if isinstance(outcome, Answered) and outcome.answer.error is not None:
        error = outcome.answer.error
        logger.warning("event will be retried: %s: %s", error.code, error.message, extra=extra)
    elif isinstance(outcome, EXPECTED_RETRIES):
        name = type(outcome).__name__
        logger.warning("event will be retried: %s: %s", name, outcome, extra=extra)
    else:
        failure = outcome if isinstance(outcome, Exception) else None
        logger.error("event failed unexpectedly; it will be retried", exc_info=failure, extra=extra)
