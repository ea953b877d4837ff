"""The two error classes every failure of a message is sorted into, by what the worker does.

The ack decision (:mod:`llm_bot.transport.ack`) reads the base class, so it does not have to
know the exception types of every package that can fail:

- :class:`PermanentError`: no later delivery can succeed, because the input itself is wrong
  (not an event, a slip that cannot be followed). The message is dead-lettered with the error
  as its reason, and acked.
- :class:`TransientError`: a later delivery may succeed (a dependency did not answer, another
  instance holds the event). The message is nacked after a backoff and delivered again, up to
  the delivery limit.

Anything else that escapes the handler is a bug or a library's own error (psycopg's connection
errors, say) and is retried like a transient one, with a traceback in the log.
"""

from __future__ import annotations

__all__ = ["PermanentError", "TransientError"]


class PermanentError(Exception):
    """No delivery of this message can succeed: dead-letter it with this error as the reason."""


class TransientError(Exception):
    """This delivery failed but a later one may not: nack it and let Pub/Sub deliver again."""
