"""The one way llm-bot builds an ``openai`` client, for the model and for embeddings alike.

Its HTTP goes through aiohttp (the client's ``DefaultAioHttpClient``) rather than httpx: two
requests an event (the model, the embeddings) make the HTTP client a quarter of the worker's
CPU, and aiohttp's C parser and connection pool take about 14% off the CPU per event
(docs/performance.md, "Measured choices in the code"). aiohttp reads no proxy from the environment.
"""

from __future__ import annotations

import openai
from pydantic import SecretStr

# Local servers (and the test server) ignore the key, but the client insists on one.
PLACEHOLDER_KEY = "not-needed-for-local-servers"


def openai_client(
    key: SecretStr | None, base_url: str | None, timeout_s: float
) -> openai.AsyncOpenAI:
    """Its own retries off: callers bound their attempts inside one deadline."""
    return openai.AsyncOpenAI(
        api_key=key.get_secret_value() if key else PLACEHOLDER_KEY,
        base_url=base_url,
        timeout=timeout_s,
        max_retries=0,
        http_client=openai.DefaultAioHttpClient(),
    )
