"""The three classes every failure of a message is sorted into, named by what the worker does.

The decision (:func:`llm_bot.transport.decision.decide`) reads the base class, so it does not
have to know the exception types of every package that can fail:

- :class:`DeadLetterError`: no later delivery can succeed, because the input itself is wrong
  (not an event, a slip that cannot be followed) or the event keeps failing where no answer can
  be forwarded. The message is dead-lettered with the error as its reason, and acked.
- :class:`RetryLaterError`: this delivery failed, a later one may not (another instance holds
  the event, a publish was not confirmed). The message is nacked after a backoff and delivered
  again.
- :class:`ForwardAsError`: the event's step failed (the model refused, the deadline passed);
  the step is closed as ERROR with the error's ``code`` and the event forwarded. One whose
  ``retryable`` is set (the model was unavailable) is nacked first, while attempts remain.

Anything else that escapes the handler is a bug or a library's own error (psycopg's connection
errors, say) and is retried like a :class:`RetryLaterError`, with a traceback in the log.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["DeadLetterError", "ForwardAsError", "RetryLaterError"]


class DeadLetterError(Exception):
    """No delivery of this message can succeed: dead-letter it with this error as the reason.
    ``kind`` names the class of reason for the dead-letter metric's ``reason`` label: a few
    fixed values, never the message, which may carry anything."""

    kind: ClassVar[str] = "dead_letter"


class RetryLaterError(Exception):
    """This delivery failed but a later one may not: nack it and let Pub/Sub deliver again."""


class ForwardAsError(Exception):
    """The step fails: closed as ERROR with ``code`` and the event forwarded; while attempts
    remain, nacked instead when ``retryable``. ``message`` goes to the published step and the
    event's ``errors[]``: it never carries keys, URLs with credentials or traces. Each subclass
    has a ``code`` of its own (``tests/unit/transport/test_decision.py``)."""

    code: ClassVar[str]
    retryable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
