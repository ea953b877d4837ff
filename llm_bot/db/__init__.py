"""Postgres plumbing that is not memory: migrations, the group committer, the processed-events
ledger, the store's schema and the binary vector encoding."""
