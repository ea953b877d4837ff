"""Retrieval quality, measured: the evaluation over labelled conversations and the calibration
of the similarity threshold."""
