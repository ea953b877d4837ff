"""The system assembled on one machine: ``llm-bot dev``, the ``send`` client, and the worker
harness that tests and benchmarks drive."""
