"""Concurrent events share embeddings requests, each still gets its own vectors, and one
caller's text the endpoint refuses costs no other caller theirs."""

from __future__ import annotations

import asyncio

import pytest

from llm_bot.llm.embedding_batch import BatchingEmbedder
from llm_bot.llm.embeddings import EmbeddingError, EmbeddingInputRejected, OpenAIEmbedder
from llm_bot_tools.local.openai_payloads import REJECT_CUE
from llm_bot_tools.local.openai_server import EMBEDDINGS_PATH, LocalModelServer

TEXTS = ["I am vegetarian", "my time zone is CET", "call me Ada", "I like thrillers"]


def embedding_requests(server: LocalModelServer) -> int:
    return sum(r.path == EMBEDDINGS_PATH for r in server.requests)


async def test_concurrent_callers_share_one_request_and_get_their_own_vectors(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    alone = [(await inner.embed([text]))[0] for text in TEXTS]
    embedding_server.reset()
    batching = BatchingEmbedder(inner, max_wait_s=0.05)

    results = await asyncio.gather(
        *(batching.embed([text]) for text in TEXTS), batching.embed(TEXTS[:2])
    )

    assert embedding_requests(embedding_server) == 1
    assert [r[0] for r in results[:4]] == alone
    assert results[4] == alone[:2]


async def test_a_full_batch_goes_out_without_waiting(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    batching = BatchingEmbedder(inner, max_wait_s=60, max_batch=2)

    vectors = await asyncio.wait_for(batching.embed(TEXTS[:2]), timeout=10)

    assert len(vectors) == 2
    assert embedding_requests(embedding_server) == 1


async def test_a_call_when_calls_are_rare_goes_out_without_waiting(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    """An hour's wait: had the call waited for company, the guard would end the test."""
    batching = BatchingEmbedder(inner, max_wait_s=3600)
    now = asyncio.get_running_loop().time()
    batching.arrivals.note(now - 2e6)  # calls a million seconds apart: next to none in an hour
    batching.arrivals.note(now - 1e6)

    vectors = await asyncio.wait_for(batching.embed(TEXTS[:1]), timeout=60)

    assert len(vectors) == 1
    assert embedding_requests(embedding_server) == 1


@pytest.mark.parametrize(
    ("status", "requests"),
    [(500, 3), (401, 1)],  # the embedder tries a 500 three times; credentials are not retried
)
async def test_a_failed_request_fails_every_caller_in_it_and_the_next_batch_works(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder, status: int, requests: int
) -> None:
    batching = BatchingEmbedder(inner, max_wait_s=0.05)
    embedding_server.fail_next(requests, status=status, kind="embeddings")

    outcomes = await asyncio.gather(
        *(batching.embed([text]) for text in TEXTS), return_exceptions=True
    )

    assert all(isinstance(outcome, EmbeddingError) for outcome in outcomes)
    assert embedding_requests(embedding_server) == requests  # not sent again text by text
    assert len(await batching.embed(["after the outage"])) == 1


async def test_a_refused_text_fails_only_its_caller(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    alone = [(await inner.embed([text]))[0] for text in TEXTS]
    embedding_server.reset()
    batching = BatchingEmbedder(inner, max_wait_s=0.05)

    *good, bad, pair = await asyncio.gather(
        *(batching.embed([text]) for text in TEXTS),
        batching.embed([f"too long for the model {REJECT_CUE}"]),
        batching.embed(TEXTS[:2]),
        return_exceptions=True,
    )

    assert good == [[vector] for vector in alone]
    assert pair == alone[:2]
    assert isinstance(bad, EmbeddingInputRejected)
    assert embedding_requests(embedding_server) == 1 + len(TEXTS) + 1  # shared, then one each


async def test_a_refused_request_whose_texts_pass_alone_fails_no_one(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    batching = BatchingEmbedder(inner, max_wait_s=0.05)
    embedding_server.fail_next(1, status=413, kind="embeddings")  # the request as a whole

    results = await asyncio.gather(*(batching.embed([text]) for text in TEXTS))

    assert [len(vectors) for vectors in results] == [1] * len(TEXTS)


async def test_a_lone_surrogate_is_embedded_as_a_replacement_character(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    batching = BatchingEmbedder(inner, max_wait_s=0.05)

    broken, *others = await asyncio.gather(
        batching.embed(["I am \ud800 vegetarian"]), *(batching.embed([text]) for text in TEXTS)
    )

    [request] = [r for r in embedding_server.requests if r.path == EMBEDDINGS_PATH]
    assert request.body is not None
    assert request.body["input"][0] == "I am \ufffd vegetarian"
    assert broken == await inner.embed(["I am \ufffd vegetarian"])
    assert [len(vectors) for vectors in others] == [1] * len(TEXTS)


async def test_a_caller_that_gives_up_does_not_disturb_the_others(
    embedding_server: LocalModelServer, inner: OpenAIEmbedder
) -> None:
    batching = BatchingEmbedder(inner, max_wait_s=0.05)

    # The impatient caller's timeout falls before the batch's wait is over (timers run in order).
    impatient, patient = await asyncio.gather(
        asyncio.wait_for(batching.embed(["I cannot wait"]), timeout=0.001),
        batching.embed(["I can wait"]),
        return_exceptions=True,
    )

    assert isinstance(impatient, TimeoutError)
    assert isinstance(patient, list)
    assert len(patient) == 1
    assert embedding_requests(embedding_server) == 1
