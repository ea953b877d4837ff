"""The embeddings cache is bounded by the bytes it holds, least recently used out first, and
holds no text: its entries are filed under hashes."""

from __future__ import annotations

import gc

from llm_bot.llm.embeddings import CachingEmbedder, OpenAIEmbedder, entry_bytes
from llm_bot_tools.local.openai_payloads import DEFAULT_EMBEDDING_DIMENSIONS
from llm_bot_tools.local.openai_server import EMBEDDINGS_PATH, LocalModelServer

SMALL = ["memory one", "memory two", "memory six", "memory ten"]
SMALL_BYTES = entry_bytes([0.0] * DEFAULT_EMBEDDING_DIMENSIONS)


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


async def test_a_long_text_costs_its_entry_what_a_short_one_does(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    cache = CachingEmbedder(inner, max_bytes=4 * SMALL_BYTES)
    long = "l" * (5 * SMALL_BYTES)
    await cache.embed([*SMALL[:3], long])
    sent(embedding_server)

    await cache.embed([*SMALL[:3], long])
    assert sent(embedding_server) == []


def strings_held_by(cache: CachingEmbedder) -> list[str]:
    """Every string reachable from the cache's own state (not from the embedder it wraps)."""
    inner = vars(cache)["_inner"]
    seen, found, todo = {id(inner)}, [], [vars(cache)]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, str):
            found.append(item)
        else:
            todo.extend(gc.get_referents(item))
    return found


async def test_the_cache_holds_no_text(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    cache = CachingEmbedder(inner)
    secret = "my diagnosis is a secret " + "x" * 50
    first = await cache.embed([secret])
    sent(embedding_server)

    assert await cache.embed([secret]) == first
    assert sent(embedding_server) == []  # a hit
    assert not [text for text in strings_held_by(cache) if "diagnosis" in text]
