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
class Answered:
    """The event was answered on its ``attempt``-th attempt; ``last_attempt`` is the last one
    accepted. The numbers matter to an answer alone: whether a failed step may be retried."""

    answer: Answer
    attempt: int
    last_attempt: int


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
        case Answered(answer=answer, attempt=attempt, last_attempt=last):
            error = answer.error
            if error is not None and error.retryable and attempt < last:
                return Decision.NACK
            return Decision.FORWARD
