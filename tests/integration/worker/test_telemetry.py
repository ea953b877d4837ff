"""What operators see of one event: its span tree in the publisher's trace, the context on the
outgoing message, the Prometheus metrics, and JSON log lines with ids and no secrets."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import urllib.request
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from llm_bot.telemetry.logs import JsonFormatter, event_ids
from llm_bot.telemetry.metrics import setup_metrics
from llm_bot.telemetry.traces import setup_tracing, tracer
from llm_bot_tools.devstack.worker_harness import Bus, running_worker
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = pytest.mark.integration
PUBLISHER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{PUBLISHER_TRACE}-00f067aa0ba902b7-01"


class WatchedSpans(InMemorySpanExporter):
    """The finished spans, and a wait for them: an event's span ends after its output reached
    the egress topic (the ack comes between), so a test that reads an event's spans waits for
    them to end first."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        for loop, event in list(self._waiters):
            loop.call_soon_threadsafe(event.set)
        return result

    async def ended(self, name_prefix: str, count: int = 1) -> None:
        """Until ``count`` finished spans have names starting with ``name_prefix``."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        self._waiters.append(waiter)
        try:
            while sum(s.name.startswith(name_prefix) for s in self.get_finished_spans()) < count:
                waiter[1].clear()
                await waiter[1].wait()
        finally:
            self._waiters.remove(waiter)


@pytest.fixture(scope="session")
def telemetry() -> tuple[WatchedSpans, CollectorRegistry]:
    """The process-wide providers, installed once (OpenTelemetry allows one of each)."""
    exporter = WatchedSpans()
    setup_tracing(processor=SimpleSpanProcessor(exporter))
    return exporter, setup_metrics(CollectorRegistry())


@pytest.fixture
def spans(telemetry: tuple[WatchedSpans, CollectorRegistry]) -> WatchedSpans:
    telemetry[0].clear()
    return telemetry[0]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_one_event_is_one_span_tree_in_the_publishers_trace_and_metrics_follow(
    bus: Bus,
    model_server: LocalModelServer,
    spans: WatchedSpans,
    telemetry: tuple[WatchedSpans, CollectorRegistry],
) -> None:
    event = prompt_event("hello there", user="tia", thread="lobby", egress_topic=bus.egress_topic)
    data, attributes = (
        event.model_dump_json(by_alias=True, exclude_unset=True).encode(),
        {
            "type": event.type,
            "correlationId": event.correlation_id,
            "traceparent": TRACEPARENT,
        },
    )
    egress = bus.tap(bus.egress_topic)
    settings = bus.settings()
    async with running_worker(settings, metrics_registry=telemetry[1]):
        bus.publish(data, attributes)
        (message,) = await egress.take(1)
        url = f"http://127.0.0.1:{settings.port}/metrics"
        exposition = await asyncio.to_thread(fetch, url)
        # The count is added just after the ack that follows the publish; the loop-lag probe
        # reports every quarter second.
        for _ in range(50):
            if "llmbot_events_total" in exposition and "llmbot_event_loop_lag" in exposition:
                break
            await asyncio.sleep(0.1)
            exposition = await asyncio.to_thread(fetch, url)

    finished = spans.get_finished_spans()
    (consumer,) = [s for s in finished if s.name.startswith("process ")]
    assert f"{consumer.context.trace_id:032x}" == PUBLISHER_TRACE
    assert consumer.parent is not None
    assert f"{consumer.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert consumer.attributes is not None
    assert consumer.attributes["messaging.system"] == "gcp_pubsub"
    assert consumer.attributes["messaging.message.id"]
    assert consumer.attributes["messaging.gcp_pubsub.message.delivery_attempt"] >= 1

    in_trace = [s for s in finished if s.context.trace_id == consumer.context.trace_id]
    names = {s.name for s in in_trace}
    for node in ("ingest_prompt", "retrieve_memories", "call_model", "build_candidate"):
        assert f"graph.node {node}" in names
    assert {"memory.notes and window", "memory.memories", "memory.recall"} <= names
    (model_call,) = [s for s in in_trace if s.name.startswith("chat ")]
    assert model_call.attributes is not None
    assert model_call.attributes["gen_ai.operation.name"] == "chat"
    assert model_call.attributes["gen_ai.provider.name"] == "openai"
    assert model_call.attributes["gen_ai.usage.input_tokens"] > 0
    (send,) = [s for s in in_trace if s.name.startswith("send ")]
    assert send.parent is not None
    assert send.parent.span_id == consumer.context.span_id

    outgoing = message.attributes["traceparent"]
    assert outgoing.split("-")[1] == PUBLISHER_TRACE
    assert outgoing.split("-")[2] == f"{send.context.span_id:016x}"
    assert json.loads(message.data)["traceId"] == PUBLISHER_TRACE

    expected = [
        ("llmbot_events_total", 'outcome="OK"'),
        ("llmbot_event_duration_seconds_bucket", 'outcome="OK"'),
        ("llmbot_queue_lag_seconds_bucket", ""),
        ("llmbot_in_flight", ""),
        ("llmbot_model_tokens_total", 'direction="input"'),
        ("llmbot_stage_duration_seconds_bucket", 'stage="call_model"'),
        ("llmbot_stage_duration_seconds_bucket", 'stage="commit"'),
        ("llmbot_memory_retrieval_duration_seconds_bucket", ""),
        ("llmbot_memory_retrievals_total", ""),
        ("llmbot_context_tokens_bucket", 'part="window"'),
        ("llmbot_stage_duration_seconds_bucket", 'stage="claim"'),
        ("llmbot_commit_duration_seconds_bucket", ""),
        ("llmbot_commit_batch_size_bucket", ""),
        ("llmbot_event_loop_lag_seconds_bucket", ""),
        # Durations in seconds get sub-second buckets, so their quantiles mean something.
        ("llmbot_event_duration_seconds_bucket", 'le="0.005"'),
    ]
    lines = exposition.splitlines()
    for name, label in expected:
        assert any(line.startswith(name) and label in line for line in lines), (name, label)
    # The worker's own counts, which the benchmark reads from here.
    assert 'llmbot_worker_counts_total{count="received"} 1.0' in lines
    assert 'llmbot_worker_counts_total{count="acked"} 1.0' in lines


@pytest.mark.usefixtures("telemetry")
def test_log_lines_are_json_with_ids_trace_and_no_secret() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("proj", secrets=["sk-live-secret-key-123"]))
    logger = logging.getLogger("llm_bot.test.telemetry")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with (
            tracer.start_as_current_span("work") as span,
            event_ids(correlationId="c-1", userId="u-1", threadId="t-1"),
        ):
            logger.warning("model said no with key sk-live-secret-key-123", extra={"code": "X"})
    finally:
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["severity"] == "WARNING"
    assert (line["correlationId"], line["userId"], line["threadId"], line["code"]) == (
        "c-1",
        "u-1",
        "t-1",
        "X",
    )
    trace_id = f"{span.get_span_context().trace_id:032x}"
    assert line["logging.googleapis.com/trace"] == f"projects/proj/traces/{trace_id}"
    assert "sk-live-secret-key-123" not in stream.getvalue()
    assert "[REDACTED]" in line["message"]


async def test_memory_searches_the_behaviour_decision_and_the_explanation_are_on_the_spans(
    bus: Bus,
    model_server: LocalModelServer,
    spans: WatchedSpans,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GenAI conventions: a ``search_memory`` span per memory search and recall with the
    records' count, their ids and scores only under the content-capture opt-in (never their
    text); ``gen_ai.guardrail.result`` where the behaviour layer decides; the explanation's id
    on the event's span."""
    fact = "Tia keeps bees on the roof"
    egress = bus.tap(bus.egress_topic)

    async def ask(text: str) -> str:
        """Once the event's output is out and its span ended."""
        event = prompt_event(text, user="tia", thread="hive", egress_topic=bus.egress_topic)
        ended = sum(s.name.startswith("process ") for s in spans.get_finished_spans())
        bus.publish_event(event)
        await egress.take(1)
        async with asyncio.timeout(30):
            await spans.ended("process ", ended + 1)
        return event.correlation_id

    async with running_worker(bus.settings()):
        await ask(f"[[tool:upsertMemory {json.dumps({'content': fact})}]] remember it")
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        spans.clear()
        plain = await ask("what do I keep?")
        plain_spans = spans.get_finished_spans()
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        spans.clear()
        await ask("and where?")
        captured_spans = spans.get_finished_spans()

    def searches(finished: Sequence[ReadableSpan], store: str) -> list[dict[str, Any]]:
        found = [s for s in finished if s.name == f"search_memory {store}"]
        return [dict(s.attributes or {}) for s in found]

    (memories,) = searches(plain_spans, "memories")
    assert memories["gen_ai.operation.name"] == "search_memory"
    assert memories["gen_ai.memory.record.count"] == 1
    assert "gen_ai.memory.records" not in memories
    (recall,) = searches(plain_spans, "conversation_turns")
    assert "gen_ai.memory.record.count" in recall
    (captured,) = searches(captured_spans, "memories")
    (record,) = json.loads(captured["gen_ai.memory.records"])
    assert set(record) == {"id", "score"}
    assert fact not in captured["gen_ai.memory.records"]

    (ingest,) = [s for s in plain_spans if s.name == "graph.node ingest_prompt"]
    assert (ingest.attributes or {})["gen_ai.guardrail.result"] == "PROCEED"
    (consumer,) = [s for s in plain_spans if s.name.startswith("process ")]
    assert (consumer.attributes or {})["llm_bot.explanation.id"] == plain
