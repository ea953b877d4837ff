"""What the worker does with a message, decided in one place from how its handling went.

:func:`decide` is pure: the outcome, the attempt and the last attempt accepted in, the
:class:`Decision` out. The handler enacts ``FORWARD`` itself (commit the output, publish it)
and acts on an answer's ``NACK`` by raising; :func:`llm_bot.transport.ack.settle` enacts the
decision on whatever ends the handling. ``tests/unit/transport/test_decision.py`` holds the
whole table.
"""

from __future__ import annotations

from enum import Enum

from llm_bot.answer.unit import Answer
from llm_bot.errors import DeadLetterError


class Decision(Enum):
    ACK = "ack"  # nothing left to do: the event's output is on the bus
    NACK = "nack"  # hand the message back, for a later delivery after a backoff
    FORWARD = "forward"  # commit and publish the closed step (OK, SKIP or ERROR), then ack
    DEAD_LETTER = "dead-letter"  # publish it to the dead-letter topic with the reason, then ack


class Mark(Enum):
    """The outcomes that are neither an answer nor an exception."""

    PUBLISHED = "published"  # the event's output is on the bus: ours, or an earlier attempt's
    # An earlier attempt claimed the event and never settled it (its worker died, its publish
    # never confirmed): there was no answer to forward, and running it again may end alike.
    ABANDONED = "abandoned"


Outcome = Answer | Exception | Mark


def decide(outcome: Outcome, attempt: int, limit: int) -> Decision:
    """``attempt`` is the number of the attempt that ended in ``outcome`` (for
    :attr:`Mark.ABANDONED`, the last one abandoned), ``limit`` the last attempt accepted.

    An exception decides by its class alone: a message that keeps failing ends in Pub/Sub's
    dead-letter policy, or, when its attempts are abandoned, in our own count of them.
    """
    match outcome:
        case Mark.PUBLISHED:
            return Decision.ACK
        case Mark.ABANDONED:
            return Decision.NACK if attempt < limit else Decision.DEAD_LETTER
        case DeadLetterError():
            return Decision.DEAD_LETTER
        case Exception():
            return Decision.NACK
        case Answer():
            error = outcome.result.error
            if error is not None and error.retryable and attempt < limit:
                return Decision.NACK
            return Decision.FORWARD
