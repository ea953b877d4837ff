"""What the embedders send: each text cut to MEMORY_EMBEDDING_MAX_CHARS and made encodable, and
a refusal told apart from other failures."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from llm_bot.db.migrate import migrate
from llm_bot.llm.embeddings import (
    EmbeddingError,
    EmbeddingInputRejected,
    LocalEmbedder,
    OpenAIEmbedder,
    embedder_from_settings,
)
from llm_bot.memory.wiring import open_memory_store
from llm_bot.settings import load_settings
from llm_bot_tools.local.openai_server import EMBEDDINGS_PATH, LocalModelServer

from ..conftest import server_embedder

LONG_TEXT = "remember that I like green tea " * 700  # 21,700 characters


@pytest.fixture
async def embedder(embedding_server: LocalModelServer) -> AsyncIterator[OpenAIEmbedder]:
    embedding_server.reset()
    embedder = server_embedder(embedding_server)
    yield embedder
    await embedder.close()


def received_inputs(server: LocalModelServer) -> list[str]:
    return [
        text
        for request in server.requests
        if request.path == EMBEDDINGS_PATH and request.body is not None
        for text in request.body["input"]
    ]


async def test_a_long_text_is_embedded_cut_to_the_default_max_chars(
    embedding_server: LocalModelServer, embedder: OpenAIEmbedder
) -> None:
    [vector] = await embedder.embed([LONG_TEXT])

    assert received_inputs(embedding_server) == [LONG_TEXT[:8000]]
    assert [vector] == await embedder.embed([LONG_TEXT[:8000]])


async def test_max_chars_comes_from_the_setting(embedding_server: LocalModelServer) -> None:
    embedding_server.reset()
    settings = load_settings(
        OPENAI_BASE_URL=embedding_server.base_url,
        MEMORY_EMBEDDING_PROVIDER="openai",
        MEMORY_EMBEDDING_ENDPOINT=None,
        MEMORY_EMBEDDING_MAX_CHARS=100,
    )
    embedder = embedder_from_settings(settings)
    try:
        await embedder.embed([LONG_TEXT, "short"])
    finally:
        await embedder.close()

    assert received_inputs(embedding_server) == [LONG_TEXT[:100], "short"]


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_a_refused_request_is_told_apart(
    embedding_server: LocalModelServer, embedder: OpenAIEmbedder, status: int
) -> None:
    embedding_server.fail_next(1, status=status, kind="embeddings")

    with pytest.raises(EmbeddingInputRejected, match=f"HTTP {status}"):
        await embedder.embed(["any text"])


@pytest.mark.parametrize("status", [401, 404, 500])
async def test_other_failures_are_not_refusals_of_the_input(
    embedding_server: LocalModelServer, embedder: OpenAIEmbedder, status: int
) -> None:
    embedding_server.fail_next(3, status=status, kind="embeddings")

    with pytest.raises(EmbeddingError) as raised:
        await embedder.embed(["any text"])

    assert not isinstance(raised.value, EmbeddingInputRejected)


async def test_the_local_model_embeds_a_lone_surrogate_and_a_long_text() -> None:
    embedder = LocalEmbedder(max_chars=50)

    broken, long, short = await embedder.embed(["ok \ud800 then", LONG_TEXT, "ok \ud801 then"])

    # Padded to the longest text of a call, a vector may differ from its alone in the last bits.
    replaced, cut = await embedder.embed(["ok \ufffd then", LONG_TEXT[:50]])
    assert broken == pytest.approx(replaced, abs=1e-6)
    assert short == pytest.approx(replaced, abs=1e-6)
    assert long == pytest.approx(cut, abs=1e-6)


async def test_the_local_model_is_loaded_before_the_store_opens(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The worker reports ready only after its store is open: by then the model is loaded (not
    on the first event, inside its retrieval timeout), and encoding draws no progress bar even
    at INFO, the worker's log level."""
    monkeypatch.setattr(LocalEmbedder, "_loaded", None)
    logging.getLogger("sentence_transformers").setLevel(logging.INFO)
    migrate(fresh_database_url)
    settings = load_settings(DATABASE_URL=fresh_database_url, MEMORY_EMBEDDING_PROVIDER="local")
    async with open_memory_store(settings) as store:
        assert LocalEmbedder._loaded is not None
        await store.embedder.embed(["first event"] * 40)
    printed = capfd.readouterr().err
    assert "Loading weights" not in printed
    assert "Batches" not in printed
