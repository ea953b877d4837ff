"""Settling a message: one context manager around its handling, enacting the decision
(:func:`llm_bot.transport.decision.decide`) on how the handling ended.

- no exception: the output is committed and on the bus → ack;
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
from llm_bot.events.models import SOURCE
from llm_bot.transport.decision import Decision, decide
from llm_bot.transport.stats import WorkerStats

logger = logging.getLogger(__name__)

MAX_ATTRIBUTE_BYTES = 1024  # Pub/Sub's cap on one attribute value
MAX_ATTRIBUTES = 100  # Pub/Sub's cap on a message's attributes
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


@asynccontextmanager
async def settle(
    delivery: Delivery, dead_letter: DeadLetter, stats: WorkerStats, limit: int
) -> AsyncIterator[None]:
    """Ack, dead-letter or nack ``delivery`` according to how the block ends; ``limit`` is the
    last delivery attempt accepted. The block ends once the output is on the bus
    (``Mark.PUBLISHED``: ack), or raises."""
    try:
        yield
    except asyncio.CancelledError:  # shutdown: hand the message back, unfinished
        stats.nacked += 1
        await delivery.nack()
        raise
    except Exception as error:
        if isinstance(error, DeadLetterError) and (
            decide(error, delivery.delivery_attempt, limit) is Decision.DEAD_LETTER
        ):
            await _dead_letter_or_retry(delivery, error, dead_letter, stats)
        else:
            _log_retry(delivery, error)
            await _nack_after_backoff(delivery, stats)
    else:
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


def _log_retry(delivery: Delivery, error: Exception) -> None:
    extra = {"messageId": delivery.message_id, "deliveryAttempt": delivery.delivery_attempt}
    if isinstance(error, EXPECTED_RETRIES):
        logger.warning("event will be retried: %s: %s", type(error).__name__, error, extra=extra)
    else:
        logger.exception("event failed unexpectedly; it will be retried", extra=extra)
