"""Pub/Sub in and out: streaming pull into the event loop, publishing, ack decisions."""
