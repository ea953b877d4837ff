"""The system assembled on one machine: ``llm-bot dev``, the ``send`` client, and the worker
harness that tests and benchmarks drive.

The modules are the public API; none is imported here, so the command line loads only the one
it runs (the local components pull in pgserver and the emulator's clients)."""

__all__ = ["send", "stack", "worker_harness"]
