"""Model access: the OpenAI-compatible client wrapper, embeddings, retry policies."""
