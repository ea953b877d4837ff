"""Retrieval quality, measured: the evaluation over labelled conversations and the calibration
of the similarity threshold.

The modules are the public API; none is imported here (see :mod:`llm_bot_tools.bench`)."""

__all__ = ["calibration", "retrieval"]
