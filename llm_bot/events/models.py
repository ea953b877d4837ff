"""Pydantic models of the BitBrat wire format (``InternalEventV2`` and its parts).

Every model keeps fields it does not know (``extra="allow"``) and the codec serializes with
``exclude_unset``, so an event that passes through llm-bot comes out with exactly the keys it
came in with, plus what we deliberately change. Timestamps stay strings: re-formatting a date
the producer wrote would be a change we did not mean to make.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

# llm-bot's name on the platform: the id of its routing step, and the source of every candidate,
# annotation, error entry, dead letter and message it writes.
SOURCE = "llm-bot"
RoutingStatus = Literal["PENDING", "OK", "ERROR", "SKIP"]
StrictNumber = Annotated[int, Strict()] | Annotated[float, Strict()]
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
        # A NaN or an infinity stays one (pydantic would write null where a value is serialized
        # as Any, as a wrap serializer's result is), so the codec refuses it (codec.encode).
        ser_json_inf_nan="constants",
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
    """One annotation. Its optional fields are read as their types say, but a value of another
    JSON type (a numeric ``label``, a ``payload`` that is a list) is no reason to refuse the
    event, since the platform's consumers read such values with fallbacks: it reads as unset
    and is published again as it came (``_unread``)."""

    id: str
    kind: str
    source: str | None = None
    created_at: str | None = None
    # Strict: "0.5" or true is set aside as it came, not published as 0.5 or 1.
    confidence: StrictNumber | None = None
    label: str | None = None
    value: Any = None  # text by the type, but the platform's consumers also take JSON objects
    score: StrictNumber | None = None
    payload: dict[str, Any] | None = None
    _unread: dict[str, Any] = PrivateAttr(default_factory=dict)  # field name -> value as given

    @model_validator(mode="wrap")
    @classmethod
    def _set_aside_unreadable(
        cls, data: Any, handler: ModelWrapValidatorHandler[AnnotationV1]
    ) -> AnnotationV1:
        try:
            return handler(data)
        except ValidationError as error:
            unread = _unreadable_optional_fields(cls, data, error)
            if not unread:
                raise
            annotation = handler({**data, **dict.fromkeys(unread, None)})
            annotation._unread = {cls._field_of(key): data[key] for key in unread}
            return annotation

    @classmethod
    def _field_of(cls, key: str) -> str:
        return next((n for n, f in cls.model_fields.items() if key in (n, f.alias)), key)

    @model_serializer(mode="wrap")
    def _with_unread(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        document: dict[str, Any] = handler(self)
        for name, value in self._unread.items():
            key = to_camel(name) if info.by_alias else name
            if key in document and document[key] is None:
                document[key] = value
        return document


def _unreadable_optional_fields(
    model: type[BaseModel], data: Any, error: ValidationError
) -> set[str]:
    """The keys of ``data`` naming optional fields whose value failed, when nothing else did."""
    if not isinstance(data, dict):
        return set()
    optional = {
        key
        for name, field in model.model_fields.items()
        if not field.is_required()
        for key in (name, field.alias)
    }
    failed = {problem["loc"][0] if problem["loc"] else None for problem in error.errors()}
    if not all(isinstance(key, str) and key in optional and key in data for key in failed):
        return set()
    return {key for key in failed if isinstance(key, str)}


class CandidateV1(WireModel):
    """One candidate reply. ``source``, ``createdAt``, ``status`` and ``priority`` are required
    by the type and always set on ours, but the platform's router copies a rule's candidates
    onto the event as the rule wrote them, often without them (BitBrat's own lurk and token
    rules do): unset, they are published as they came."""

    id: str
    kind: str
    source: str | None = None
    created_at: str | None = None
    status: str | None = None  # CandidateStatus by the type; rules may set others
    priority: int | float | None = None
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
