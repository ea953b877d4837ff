"""The service's metrics, as OpenTelemetry instruments, exported to Prometheus and OTLP.

Names are chosen so the Prometheus exposition reads as the dashboard expects
(``deploy/dashboard.json``): a counter ``llmbot_events`` becomes ``llmbot_events_total``, a
histogram in seconds ``llmbot_event_duration_seconds``. Instruments come from the global meter,
so modules record without being handed anything; :func:`setup_metrics` decides where they go.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from opentelemetry import metrics
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, ExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric

from llm_bot.telemetry.resource import service_resource

_meter = metrics.get_meter("llm_bot")

# Bucket boundaries: the SDK's defaults (0, 5, 10, 25, ...) are made for milliseconds, and would
# put every duration in seconds into the first bucket, leaving quantiles meaningless.
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
SIMILARITY = tuple(round(0.1 * step, 1) for step in range(-2, 11))
BATCH = (1, 2, 4, 8, 16, 32, 64, 128)


def _seconds_histogram(name: str, description: str) -> metrics.Histogram:
    return _meter.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=SECONDS
    )


events = _meter.create_counter("llmbot_events", description="events by outcome")
event_duration = _seconds_histogram("llmbot_event_duration", "receipt to ack, per event")
stage_duration = _seconds_histogram(
    "llmbot_stage_duration", "time per stage (graph node, claim, commit, publish)"
)
queue_lag = _seconds_histogram("llmbot_queue_lag", "publish time to start of processing")
in_flight = _meter.create_up_down_counter("llmbot_in_flight", description="events being handled")
model_tokens = _meter.create_counter("llmbot_model_tokens", description="tokens by direction")
memory_retrieval_duration = _seconds_histogram(
    "llmbot_memory_retrieval_duration", "memory retrieval per event"
)
memory_retrievals = _meter.create_counter("llmbot_memory_retrievals", description="retrievals")
memory_hits = _meter.create_counter("llmbot_memory_hits", description="hits by kind")
memory_score = _meter.create_histogram(
    "llmbot_memory_score",
    description="similarity of hits",
    explicit_bucket_boundaries_advisory=SIMILARITY,
)
context_tokens = _meter.create_histogram(
    "llmbot_context_tokens", description="tokens of each context part per event"
)
commit_duration = _seconds_histogram("llmbot_commit_duration", "one group-commit transaction")
mcp_connected = _meter.create_up_down_counter(
    "llmbot_mcp_connected", description="1 while the MCP server (label server) is connected"
)
mcp_circuit_open = _meter.create_up_down_counter(
    "llmbot_mcp_circuit_open",
    description="1 while the MCP server's (label server) circuit is open: its calls fail at once",
)
tool_ledger = _meter.create_counter(
    "llmbot_tool_ledger",
    description="platform-tool calls by what the once-only ledger did (label result: sent,"
    " replayed, repeated, not_repeated, unknown)",
)
tool_calls = _meter.create_counter(
    "llmbot_tool_calls", description="platform-tool calls by tool id and outcome (ok, error)"
)
commit_batch_size = _meter.create_histogram(
    "llmbot_commit_batch_size",
    description="events' writes sharing one transaction",
    explicit_bucket_boundaries_advisory=BATCH,
)
loop_lag = _seconds_histogram(
    "llmbot_event_loop_lag", "how late the event loop runs a due callback"
)
retries = _meter.create_counter("llmbot_retries", description="retries by dependency")
deadletters = _meter.create_counter("llmbot_deadletters", description="dead-lettered by reason")
lease_renewal_failures = _meter.create_counter(
    "llmbot_lease_renewal_failures",
    description="claim-lease renewals that failed, by reason (deadlock, statement_timeout,"
    " pool_timeout: no free connection, timeout: statements cut off after a lease, connection,"
    " other): four in a row and a live worker's claims lapse",
)


# A worker's named counts (received, acked, transactions, ...) as one Prometheus counter,
# llmbot_worker_counts_total{count="acked"}: what tests and the benchmark read from outside.
WORKER_COUNTS = "llmbot_worker_counts"


class CountsCollector:
    """Counts read when ``/metrics`` is scraped, as :data:`WORKER_COUNTS` by ``count``.

    The worker keeps its counts as plain integers (:class:`~llm_bot.transport.stats.WorkerStats`,
    a named field each), so they are exported from there rather than counted twice."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            WORKER_COUNTS, "what the worker did since it started, by count", labels=["count"]
        )
        for name, value in self._read().items():
            family.add_metric([name], value)
        yield family


@contextlib.contextmanager
def timed(
    histogram: metrics.Histogram, attributes: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Record how long the block took, in seconds, also when it raises."""
    began = time.perf_counter()
    try:
        yield
    finally:
        histogram.record(time.perf_counter() - began, attributes)


def setup_metrics(
    registry: CollectorRegistry | None = None, readers: Sequence[MetricReader] = ()
) -> CollectorRegistry:
    """Install the global meter provider once; returns the registry ``/metrics`` serves."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    registry = registry or CollectorRegistry()
    all_readers: list[MetricReader] = [
        PrometheusMetricReader(registry=registry, scope_info_enabled=False),
        *readers,
    ]
    # An exemplar ties a measurement to its trace, and only OTLP carries one: without it, the
    # SDK's default filter would still look up the current span at every measurement.
    exemplars: ExemplarFilter | None = AlwaysOffExemplarFilter()
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
    ):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        all_readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        exemplars = None  # the SDK's default: OTEL_METRICS_EXEMPLAR_FILTER, else trace-based
    provider = MeterProvider(
        metric_readers=all_readers,
        resource=service_resource(),
        exemplar_filter=exemplars,
    )
    metrics.set_meter_provider(provider)
    return registry
