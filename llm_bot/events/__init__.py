"""The BitBrat wire contracts: models, routing-slip rules, codec, identity rules."""

from llm_bot.events.builder import prompt_event
from llm_bot.events.codec import decode, encode, from_document, to_document
from llm_bot.events.deadletter import Cause, deadletter_body
from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.events.limits import InvalidEvent, check_document, check_event
from llm_bot.events.models import CandidateV1, InternalEventV2, Outcome, RoutingStep, StepError
from llm_bot.events.routing import (
    RoutingError,
    advance,
    check_route,
    complete_current_step,
    current_step,
    prefixed,
)

__all__ = [
    "CandidateV1",
    "Cause",
    "InternalEventV2",
    "InvalidEvent",
    "Outcome",
    "RoutingError",
    "RoutingStep",
    "StepError",
    "advance",
    "check_document",
    "check_event",
    "check_route",
    "complete_current_step",
    "current_step",
    "deadletter_body",
    "decode",
    "encode",
    "from_document",
    "prefixed",
    "prompt_event",
    "thread_id_of",
    "to_document",
    "user_id_of",
]
