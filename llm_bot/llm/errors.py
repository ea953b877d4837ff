"""What can go wrong with a model call, sorted by what the worker should do about it.

The class decides ack versus nack (README, Failure handling): a retryable error nacks the message so
the subscription's retry policy backs off; a permanent one closes the step as ERROR. Messages are
written for the event's ``errors[]``: they never carry keys, URLs with credentials or traces.
"""

from __future__ import annotations


class ModelError(Exception):
    """A model call failed; ``code`` goes to the routing step's ``error.code``."""

    code = "LLM_ERROR"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ModelUnavailable(ModelError):
    """Rate limits, 5xx or connection failures outlasted the retries."""

    code = "LLM_UNAVAILABLE"
    retryable = True


class ModelTimeout(ModelError):
    """The model did not answer within the deadline."""

    code = "TIMEOUT"
    retryable = True


class ModelAuthFailed(ModelError):
    """The endpoint refused our credentials: fixable by an operator, so worth a redelivery."""

    code = "LLM_AUTH"
    retryable = True


class ModelRequestInvalid(ModelError):
    """The endpoint rejected the request itself (4xx); sending it again cannot help."""

    code = "LLM_REQUEST_INVALID"


class ModelRefused(ModelError):
    """The model declined or a content filter stopped it: a policy outcome, permanent."""

    code = "LLM_REFUSED"
