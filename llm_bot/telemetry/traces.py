"""Tracing: continue the publisher's trace, span every stage, hand the context on.

Trace context rides in message attributes: W3C ``traceparent``/``tracestate``, or the google
client's ``googclient_traceparent`` when that is all a producer set. Span names and attributes
follow the OpenTelemetry messaging conventions for the consumer and producer spans and the
GenAI conventions for model calls. Exporters come from the standard ``OTEL_*`` variables.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, TextIO, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llm_bot.telemetry.resource import service_resource

GOOGLE_TRACEPARENT = "googclient_traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()
F = TypeVar("F", bound=Callable[..., Any])

tracer = trace.get_tracer("llm_bot")


def setup_tracing(
    console: TextIO | None = None, processor: SpanProcessor | None = None
) -> TracerProvider | None:
    """Install the global tracer provider where spans have somewhere to go: OTLP when
    ``OTEL_EXPORTER_OTLP_*`` is set, the console exporter writing to ``console`` for
    ``llm-bot dev``, or the given processor (tests).

    With none of them nothing is installed. The API's no-op tracer still carries the incoming
    trace context, flags included, on to the next stage (this step is then invisible in the
    trace, as any uninstrumented hop is), while recording spans that nobody reads cost a tenth
    of the worker's CPU."""
    if processor is None:
        if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        ):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processor = BatchSpanProcessor(OTLPSpanExporter())
        elif console is not None:
            processor = BatchSpanProcessor(ConsoleSpanExporter(out=console))
        else:
            return None
    provider = TracerProvider(resource=service_resource())
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider


def extract(attributes: Mapping[str, str]) -> otel_context.Context:
    """The publisher's context from message attributes (W3C first, then the google client's)."""
    carrier = dict(attributes)
    if "traceparent" not in carrier and GOOGLE_TRACEPARENT in carrier:
        carrier["traceparent"] = carrier[GOOGLE_TRACEPARENT]
    return _PROPAGATOR.extract(carrier)


def inject(attributes: MutableMapping[str, str]) -> None:
    """Put the current context into outgoing attributes, so the next stage continues it."""
    _PROPAGATOR.inject(attributes)


@contextlib.contextmanager
def consumer_span(
    subscription: str, message_id: str, delivery_attempt: int, attributes: Mapping[str, str]
) -> Iterator[Span]:
    with tracer.start_as_current_span(
        f"process {subscription}",
        context=extract(attributes),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "gcp_pubsub",
            "messaging.operation.type": "process",
            "messaging.destination.subscription.name": subscription,
            "messaging.message.id": message_id,
            "messaging.gcp_pubsub.message.delivery_attempt": delivery_attempt,
        },
    ) as span:
        yield span


def child_span(name: str, **options: Any) -> contextlib.AbstractContextManager[Span]:
    """A span under the current one, made current; or, when the current span is not recorded
    (no tracer provider, or the trace sampled out), the current span itself.

    Children of an unrecorded span are not recorded either (the SDK's samplers follow the
    parent), so nothing is lost; the incoming context stays current and is what the next stage
    receives. Creating the unrecorded spans anyway cost ~2% of the worker's CPU: an event has a
    dozen of them."""
    current = trace.get_current_span()
    if not current.is_recording():
        return contextlib.nullcontext(current)
    return tracer.start_as_current_span(name, **options)


def tool_span(name: str, call_id: str) -> contextlib.AbstractContextManager[Span]:
    """A tool call's span, by the GenAI ``execute_tool`` conventions (an internal span named
    ``execute_tool {gen_ai.tool.name}``); arguments and results are never put on it."""
    return child_span(
        f"execute_tool {name}",
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        },
    )


# The GenAI conventions' opt-in for content on spans: a memory search's record ids and scores
# are put on its span only under it (the ids name users' threads and memories' keys).
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_VALUES = ("true", "1", "span_only", "span_and_event")


def capture_content() -> bool:
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() in _CAPTURE_VALUES


def memory_search(
    store: str, records: Callable[[Any], Sequence[tuple[str, float]]]
) -> Callable[[F], F]:
    """Run an async memory search inside a ``search_memory`` span of the GenAI memory
    conventions (``search_memory {store}``), with ``gen_ai.memory.record.count`` set from what
    it returned (``records``: each record's id and score) and, only under
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, ``gen_ai.memory.records`` holding
    those ids and scores, never a record's text."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            attributes = {"gen_ai.operation.name": "search_memory", "gen_ai.memory.store.id": store}
            with child_span(f"search_memory {store}", attributes=attributes) as span:
                result = await function(*args, **kwargs)
                if span.is_recording():
                    found = records(result)
                    span.set_attribute("gen_ai.memory.record.count", len(found))
                    if capture_content():
                        listed = [{"id": key, "score": round(score, 4)} for key, score in found]
                        span.set_attribute("gen_ai.memory.records", json.dumps(listed))
                return result

        return wrapper  # type: ignore[return-value]

    return decorate


def annotate_current(attributes: Mapping[str, str]) -> None:
    """Set ``attributes`` on the current span when it is recorded (a decision made inside a
    stage, such as the behaviour layer's ``gen_ai.guardrail.result``)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(dict(attributes))


def current_trace_id() -> str | None:
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def traced_stage(stage: str) -> Callable[[F], F]:
    """Run an async function (a graph node) inside a span named after it, and time it."""
    from llm_bot.telemetry import metrics

    def decorate(function: F) -> F:
        @functools.wraps(function)  # keeps the signature LangGraph inspects for injection
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            with (
                metrics.timed(metrics.stage_duration, {"stage": stage}),
                child_span(f"graph.node {stage}", attributes={"stage": stage}),
            ):
                return await function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
