"""Local stand-ins of the real components, each started on loopback: the Pub/Sub emulator,
an embedded Postgres with pgvector, and an OpenAI-compatible model server."""
