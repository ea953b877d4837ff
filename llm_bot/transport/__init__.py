"""Pub/Sub in and out: streaming pull into the event loop, publishing, ack decisions.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
