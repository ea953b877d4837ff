"""The whole decision table: every kind of outcome, answered on an attempt before, at and past the
last one, for several limits. Step failures are listed by their classes, so a new failure class is a
new row here, and the failure taxonomy is checked against what the worker does with each."""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import psycopg
import pytest

from llm_bot.answer.unit import Answer, DeadlineExceeded, InternalFailure
from llm_bot.consolidation.jobs import InvalidJob
from llm_bot.db.group_commit import RejectedWrite
from llm_bot.db.processed_events import ClaimBusy, ClaimLost
from llm_bot.errors import DeadLetterError, ForwardAsError
from llm_bot.events.limits import InvalidEvent
from llm_bot.events.models import Outcome as StepOutcome
from llm_bot.events.models import StepError
from llm_bot.events.routing import RoutingError
from llm_bot.graph.nodes.build_candidate import EmptyReply
from llm_bot.llm import errors as model_errors
from llm_bot.transport.consolidation import ConsolidationFailed
from llm_bot.transport.decision import Answered, Attempt, Decision, HandlingResult, Mark, decide
from llm_bot.transport.handler import AttemptsExhausted
from llm_bot.transport.publisher import PublishFailed, PublishRejected
from llm_bot_tools.local.prompt_events import prompt_event

E = TypeVar("E", bound=Exception)

ACK, NACK, FORWARD, DEAD_LETTER = (
    Decision.ACK,
    Decision.NACK,
    Decision.FORWARD,
    Decision.DEAD_LETTER,
)
LIMITS = (1, 2, 5)


class Row(NamedTuple):
    """What ``outcome`` decides on an attempt before the last, on the last, and past it."""

    outcome: Answer | Exception | Mark
    before: Decision
    last: Decision
    past: Decision


def answered(outcome: StepOutcome, failure: type[ForwardAsError] | None = None) -> Answer:
    event = prompt_event("hi", user="u", thread="t", egress_topic="internal.egress.v1")
    if failure is None:
        return Answer(outcome, event)
    error = StepError(code=failure.code, message="failed", retryable=failure.retryable)
    return Answer("ERROR", event, error=error)


RETRIED_THEN_FORWARDED = (
    model_errors.ModelUnavailable,
    model_errors.ModelTimeout,
    model_errors.ModelAuthFailed,
    InternalFailure,
)
FORWARDED_AT_ONCE = (
    model_errors.ModelError,
    model_errors.ModelRequestInvalid,
    model_errors.ModelRefused,
    EmptyReply,
    DeadlineExceeded,
)
TABLE = [
    Row(Mark.PUBLISHED, ACK, ACK, ACK),
    Row(answered("OK"), FORWARD, FORWARD, FORWARD),
    Row(answered("SKIP"), FORWARD, FORWARD, FORWARD),
    *(
        Row(answered("ERROR", failure), NACK, FORWARD, FORWARD)
        for failure in RETRIED_THEN_FORWARDED
    ),
    *(Row(answered("ERROR", failure), FORWARD, FORWARD, FORWARD) for failure in FORWARDED_AT_ONCE),
    *(
        Row(error, DEAD_LETTER, DEAD_LETTER, DEAD_LETTER)
        for error in (
            InvalidEvent("not JSON"),
            RoutingError("no topic"),
            RejectedWrite("value too long"),
            PublishRejected("topic missing"),
            AttemptsExhausted("gave up"),
        )
    ),
    *(
        Row(error, NACK, NACK, NACK)
        for error in (
            PublishFailed("no confirm"),
            ClaimBusy("held"),
            ClaimLost("taken over"),
            psycopg.OperationalError("connection lost"),
            KeyError("a bug"),
        )
    ),
]


@pytest.mark.parametrize("row", TABLE, ids=lambda row: describe(row.outcome))
@pytest.mark.parametrize("limit", LIMITS)
def test_the_decision_table(row: Row, limit: int) -> None:
    decided = [decide(on_attempt(row.outcome, attempt, limit)) for attempt in range(limit)]
    assert set(decided) == {row.before}
    assert decide(on_attempt(row.outcome, limit, limit)) is row.last
    assert decide(on_attempt(row.outcome, limit + 1, limit)) is row.past
    assert decide(on_attempt(row.outcome, limit + 10, limit)) is row.past


def on_attempt(outcome: Answer | Exception | Mark, attempt: int, limit: int) -> HandlingResult:
    """What happened on ``attempt``: only an answer carries the attempt's number."""
    return Answered(outcome, Attempt(attempt, limit)) if isinstance(outcome, Answer) else outcome


def test_every_step_failure_class_is_in_the_table() -> None:
    """A new failure class must say what the worker does with it."""
    listed = {*RETRIED_THEN_FORWARDED, *FORWARDED_AT_ONCE}
    assert all_subclasses(ForwardAsError) == listed


def test_every_step_failure_has_a_code_of_its_own() -> None:
    """The model's timeout and the event's deadline in particular: one is retried, the other
    forwarded at once, and whoever reads the step must tell them apart."""
    codes = [failure.code for failure in all_subclasses(ForwardAsError)]
    assert sorted(codes) == sorted(set(codes))
    assert (model_errors.ModelTimeout.code, DeadlineExceeded.code) == ("LLM_TIMEOUT", "TIMEOUT")


def test_every_dead_letter_class_has_a_kind_of_its_own() -> None:
    """The dead-letter metric's ``reason`` label tells an invalid event from a rejected write
    or exhausted attempts: an operator acts differently on each."""
    classes = all_subclasses(DeadLetterError)
    assert {InvalidJob, ConsolidationFailed} <= classes  # consolidation's, imported here
    kinds = [cls.kind for cls in classes]
    assert sorted(kinds) == sorted(set(kinds))
    assert {cls.__name__: cls.kind for cls in classes} == {
        "InvalidEvent": "invalid_event",
        "RoutingError": "unroutable",
        "PublishRejected": "publish_rejected",
        "RejectedWrite": "rejected_write",
        "AttemptsExhausted": "attempts_exhausted",
        "InvalidJob": "invalid_job",
        "ConsolidationFailed": "consolidation_failed",
    }


def all_subclasses(cls: type[E]) -> set[type[E]]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= all_subclasses(sub)
    return found


def describe(outcome: Answer | Exception | Mark) -> str:
    if isinstance(outcome, Answer):
        error = outcome.error
        return f"{outcome.outcome}-{error.code}" if error else outcome.outcome
    return outcome.name if isinstance(outcome, Mark) else type(outcome).__name__
