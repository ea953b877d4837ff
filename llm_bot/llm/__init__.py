"""Model access: the OpenAI-compatible client wrapper, embeddings, retry policies.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
