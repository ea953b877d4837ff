"""Benchmarks: numbers that decide design questions, reported, never asserted in tests.

The modules are the public API; none is imported here, so that importing one benchmark (or the
command line) does not start loading every heavy dependency of the others."""

__all__ = ["load", "plots", "retrieval", "service"]
