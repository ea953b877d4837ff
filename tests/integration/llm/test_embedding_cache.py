"""The embeddings cache is bounded by the bytes it holds, least recently used out first."""

from __future__ import annotations

from llm_bot.llm.embeddings import CachingEmbedder, OpenAIEmbedder, entry_bytes
from llm_bot.local.openai_payloads import DEFAULT_EMBEDDING_DIMENSIONS
from llm_bot.local.openai_server import EMBEDDINGS_PATH, LocalModelServer

SMALL = ["memory one", "memory two", "memory six", "memory ten"]  # all of one size
SMALL_BYTES = entry_bytes(SMALL[0], [0.0] * DEFAULT_EMBEDDING_DIMENSIONS)


def sent(server: LocalModelServer) -> list[str]:
    """The texts embedded since the last call, in order."""
    texts = [
        text
        for request in server.requests
        if request.path == EMBEDDINGS_PATH and request.body is not None
        for text in request.body["input"]
    ]
    server.clear()
    return texts


async def test_the_least_recently_used_text_goes_first(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    cache = CachingEmbedder(inner, max_bytes=2 * SMALL_BYTES)
    a, b, c = SMALL[:3]
    await cache.embed([a])
    await cache.embed([b])
    assert sent(embedding_server) == [a, b]

    await cache.embed([a])  # a hit: a is now the most recently used
    await cache.embed([c])  # pushes b out
    await cache.embed([a])
    assert sent(embedding_server) == [c]
    await cache.embed([b])
    assert sent(embedding_server) == [b]


async def test_a_long_text_takes_the_room_of_several_short_ones(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    cache = CachingEmbedder(inner, max_bytes=4 * SMALL_BYTES)
    long = "l" * int(1.5 * SMALL_BYTES)  # costs about 2.5 short entries: its key and its vector
    await cache.embed(SMALL)
    await cache.embed([long])
    sent(embedding_server)

    await cache.embed([SMALL[3], long])
    assert sent(embedding_server) == []
    await cache.embed(SMALL[:3])
    assert sent(embedding_server) == SMALL[:3]


async def test_a_text_larger_than_the_cache_is_not_kept_and_evicts_nothing(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    cache = CachingEmbedder(inner, max_bytes=4 * SMALL_BYTES)
    huge = "h" * (5 * SMALL_BYTES)
    await cache.embed(SMALL)
    first = await cache.embed([huge])
    sent(embedding_server)

    await cache.embed(SMALL)
    assert sent(embedding_server) == []
    assert await cache.embed([huge]) == first
    assert sent(embedding_server) == [huge[:8000]]
