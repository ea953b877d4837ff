"""Traces, metrics and JSON logs: what operators see of the service in their dashboards."""

from llm_bot.telemetry.logs import configure_json_logging, event_ids
from llm_bot.telemetry.loop_lag import watch_loop_lag
from llm_bot.telemetry.metrics import setup_metrics, timed
from llm_bot.telemetry.traces import child_span, consumer_span, inject, setup_tracing

__all__ = [
    "child_span",
    "configure_json_logging",
    "consumer_span",
    "event_ids",
    "inject",
    "setup_metrics",
    "setup_tracing",
    "timed",
    "watch_loop_lag",
]
