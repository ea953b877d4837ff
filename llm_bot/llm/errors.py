"""What can go wrong with a model call, sorted by what the worker should do about it.

Every model error closes the step as ERROR with its ``code`` and forwards the event
(:class:`~llm_bot.errors.ForwardAsError`); a ``retryable`` one (the model may answer later) is
nacked first while attempts remain (README, Failure handling). Messages are written for the
event's ``errors[]``: they never carry keys, URLs with credentials or traces.
"""

from __future__ import annotations

from llm_bot.errors import ForwardAsError


class ModelError(ForwardAsError):
    """A model call failed; ``code`` goes to the routing step's ``error.code``."""

    code = "LLM_ERROR"


class ModelUnavailable(ModelError):
    """Rate limits, 5xx or connection failures outlasted the retries."""

    code = "LLM_UNAVAILABLE"
    retryable = True


class ModelTimeout(ModelError):
    """The model did not answer within the model's deadline (``LLM_BOT_MODEL_DEADLINE_MS``),
    not the event's: that one is ``TIMEOUT`` (:class:`llm_bot.answer.unit.DeadlineExceeded`)."""

    code = "LLM_TIMEOUT"
    retryable = True


class ModelAuthFailed(ModelError):
    """The endpoint refused our credentials: fixable by an operator, so worth a redelivery."""

    code = "LLM_AUTH"
    retryable = True


class ModelRequestInvalid(ModelError):
    """The endpoint rejected the request itself (4xx); sending it again cannot help."""

    code = "LLM_REQUEST_INVALID"


class ModelRefused(ModelError):
    """The model declined or a content filter stopped it: a policy outcome, never retried."""

    code = "LLM_REFUSED"
