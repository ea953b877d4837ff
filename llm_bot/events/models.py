"""Pydantic models of the BitBrat wire format (``InternalEventV2`` and its parts).

Every model keeps fields it does not know (``extra="allow"``) and the codec serializes with
``exclude_unset``, so an event that passes through llm-bot comes out with exactly the keys it
came in with, plus what we deliberately change. Timestamps stay strings: re-formatting a date
the producer wrote would be a change we did not mean to make.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

RoutingStatus = Literal["PENDING", "OK", "ERROR", "SKIP"]
# How a stage closes its step: the statuses other than PENDING.
Outcome = Literal["OK", "SKIP", "ERROR"]
CandidateStatus = Literal["proposed", "selected", "superseded", "rejected"]


class WireModel(BaseModel):
    """Base of every wire model: camelCase on the wire, snake_case in Python, lossless."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        validate_assignment=True,
    )


class Ingress(WireModel):
    ingress_at: str
    source: str
    connector: str | None = None  # absent on the platform's own dead-letter fallbacks
    channel: str | None = None


class Egress(WireModel):
    destination: str
    type: str | None = None
    connector: str | None = None  # a rule's egress enrichment replaces egress without one
    channel: str | None = None
    metadata: dict[str, Any] | None = None


class ExternalIdentity(WireModel):
    id: str = Field(min_length=1)
    platform: str = Field(min_length=1)
    display_name: str | None = None
    roles: list[str] | None = None
    metadata: dict[str, Any] | None = None


class UserIdentity(WireModel):
    id: str = Field(min_length=1)
    email: str | None = None
    display_name: str | None = None
    roles: list[str] | None = None


class Identity(WireModel):
    external: ExternalIdentity
    user: UserIdentity | None = None
    auth: dict[str, Any] | None = None


class MessageV1(WireModel):
    id: str | None = None
    role: str | None = None
    text: str | None = None
    language: str | None = None
    raw_platform_payload: dict[str, Any] | None = None


class AnnotationV1(WireModel):
    id: str
    kind: str
    source: str | None = None
    created_at: str | None = None
    confidence: int | float | None = None
    label: str | None = None
    value: Any = None  # text by the type, but the platform's consumers also take JSON objects
    score: int | float | None = None
    payload: dict[str, Any] | None = None


class CandidateV1(WireModel):
    id: str
    kind: str
    source: str
    created_at: str
    status: str  # CandidateStatus by the type; rules may set others, and the platform keeps them
    priority: int | float
    confidence: int | float | None = None
    text: str | None = None
    format: str | None = None
    reason: str | None = None
    metadata: dict[str, Any] | None = None


class ErrorEntryV1(WireModel):
    source: str
    message: str
    fatal: bool | None = None
    at: str


class QOSV1(WireModel):
    persistence_ttl_sec: int | None = None
    tracer: bool | None = None
    max_response_ms: int | None = Field(None, ge=0)


class StepError(WireModel):
    code: str
    message: str | None = None
    retryable: bool | None = None


class RoutingStep(WireModel):
    id: str
    v: str | int | None = None
    status: RoutingStatus
    attempt: int | None = Field(None, ge=0)
    max_attempts: int | None = Field(None, ge=0)
    next_topic: str | None = None
    # Strings by the type; rules also set booleans ("progressMessage": true), sent as their text.
    attributes: dict[str, Any] | None = None
    started_at: str | None = None
    ended_at: str | None = None
    error: StepError | None = None
    notes: str | None = None


class Routing(WireModel):
    stage: str
    slip: list[RoutingStep] = Field(default_factory=list)
    history: list[RoutingStep] = Field(default_factory=list)


class InternalEventV2(WireModel):
    v: Literal["2"]
    correlation_id: str = Field(min_length=1)
    trace_id: str | None = None
    type: str
    ingress: Ingress
    identity: Identity
    egress: Egress
    external_event: dict[str, Any] | None = None
    message: MessageV1 | None = None
    payload: dict[str, Any] | None = None
    annotations: list[AnnotationV1] | None = None
    candidates: list[CandidateV1] | None = None
    qos: QOSV1 | None = None
    routing: Routing
    errors: list[ErrorEntryV1] | None = None
    metadata: dict[str, Any] | None = None
