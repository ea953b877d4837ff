"""Postgres plumbing that is not memory: migrations, the connection pools, the group committer,
the processed-events ledger, the embedding space, binary vectors and throw-away schemas for
measurements.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
