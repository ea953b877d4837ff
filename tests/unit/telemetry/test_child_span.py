"""A stage under an unrecorded span (no tracer provider, or a sampled-out trace) makes no span
of its own: the incoming context stays current, so the next stage receives it unchanged.
The span tree under a recorded span is tested in tests/integration/worker/test_telemetry.py."""

from __future__ import annotations

from opentelemetry import trace

from llm_bot.telemetry.traces import child_span, extract, inject

SAMPLED_OUT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def test_under_an_unrecorded_span_the_incoming_traceparent_goes_on_unchanged() -> None:
    incoming = trace.get_current_span(extract({"traceparent": SAMPLED_OUT}))
    with trace.use_span(incoming), child_span("graph.node call_model") as span:
        outgoing: dict[str, str] = {}
        inject(outgoing)
    assert span is incoming
    assert outgoing["traceparent"] == SAMPLED_OUT
