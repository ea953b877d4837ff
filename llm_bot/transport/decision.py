"""What the worker does with a message, decided in one place from what happened to it.

:func:`decide` is pure: what happened in, the :class:`Decision` out. Only the settlement of a
message (:mod:`llm_bot.transport.ack`) calls it; the handler reports what happened, forwards
when the decision is ``FORWARD``, and the settlement enacts the rest.
``tests/unit/transport/test_decision.py`` holds the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from llm_bot.answer.unit import Answer
from llm_bot.errors import DeadLetterError


class Decision(Enum):
    ACK = "ack"  # nothing left to do: the event's output is on the bus
    NACK = "nack"  # hand the message back, for a later delivery after a backoff
    FORWARD = "forward"  # commit and publish the closed step (OK, SKIP or ERROR), then ack
    DEAD_LETTER = "dead-letter"  # publish it to the dead-letter topic with the reason, then ack


class Mark(Enum):
    """What happened when it is neither an answer nor an exception."""

    PUBLISHED = "published"  # the event's output is on the bus: ours, or an earlier attempt's


@dataclass(frozen=True)
class Attempt:
    """Which attempt a message's handling is, of how many are accepted: the one place an
    attempt is compared with its limit, for an event (its step's ``maxAttempts`` or the
    setting) and a consolidation job (the setting) alike."""

    number: int
    last: int

    @property
    def is_last(self) -> bool:
        """No attempt follows this one: a failure now is final."""
        return self.number >= self.last

    @property
    def beyond_last(self) -> bool:
        """Attempts past the last began and never finished: another would never end either."""
        return self.number > self.last

    def given_up(self) -> str | None:
        """Why handling ends here unattempted, when this is :attr:`beyond_last` (else None):
        the reason an event and a consolidation job are dead-lettered with alike."""
        if not self.beyond_last:
            return None
        abandoned = self.number - 1
        return (
            f"gave up after {abandoned} attempt{'s' if abandoned > 1 else ''} that did not finish"
        )


@dataclass(frozen=True)
class Answered:
    """The event was answered on ``attempt``. The attempt matters to an answer alone: whether
    a failed step may be retried."""

    answer: Answer
    attempt: Attempt


HandlingResult = Answered | Exception | Mark


def decide(outcome: HandlingResult) -> Decision:
    """An exception decides by its class alone: a message that keeps failing ends in Pub/Sub's
    dead-letter policy, or, when its claims are abandoned, in our own count of them
    (:class:`llm_bot.transport.handler.AttemptsExhausted`)."""
    match outcome:
        case Mark.PUBLISHED:
            return Decision.ACK
        case DeadLetterError():
            return Decision.DEAD_LETTER
        case Exception():
            return Decision.NACK
        case Answered(answer=answer, attempt=attempt):
            error = answer.error
            if error is not None and error.retryable and not attempt.is_last:
                return Decision.NACK
            return Decision.FORWARD
