"""Benchmarks: numbers that decide design questions, reported, never asserted in tests."""
