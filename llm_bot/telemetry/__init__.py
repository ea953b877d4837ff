"""Traces, metrics and JSON logs: what operators see of the service in their dashboards.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
