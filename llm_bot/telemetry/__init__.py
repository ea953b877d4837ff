"""Traces, metrics and JSON logs: what operators see of the service in their dashboards."""
