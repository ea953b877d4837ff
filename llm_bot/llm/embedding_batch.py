"""One embeddings request for the texts that concurrent events ask for at about the same time.

Every event embeds its prompt (memory and recall search) and, when it is done, its new turn;
one request each made the embeddings the worker's largest cost: most of the CPU of a request
is the HTTP client's, not the payload's. Texts that arrive within ``max_wait_s`` of the first
pending one (or until ``max_batch`` are pending) go out together, and each caller gets its own
vectors back. The wait is made only when company is likely: when the recent rate of calls
promises next to nobody within it (an event alone: its prompt, then its turn, a model call
apart), the text goes at once.

One caller's text must not cost the others theirs. When the endpoint refuses a shared request
itself (:class:`~llm_bot.llm.embeddings.EmbeddingInputRejected`: 400, 413, 422), any one text
may be the cause, so each text is sent again alone, all at once, and only the caller whose text
is refused gets the error. Alone rather than in halves: a batch is a few texts (events share
requests within milliseconds), so one more round trip beats log2(n) rounds of halving, and
when every text is refused (an option the model does not take) it costs n requests, not 2n-1.
Any other failure (the endpoint down, throttling, credentials) fails every caller in the
request: they all degrade as they would have alone, since the endpoint is the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from llm_bot.llm.embeddings import BATCH_SIZE, Embedder, EmbeddingInputRejected
from llm_bot.telemetry.arrivals import ArrivalRate

Waiters = dict[str, list[asyncio.Future[list[float]]]]  # each text and the callers awaiting it
# Wait for company unless fewer arrivals than this are expected within the wait. Low, since the
# wait is short (3 ms): it goes for an event alone (~0.01 expected at an 800 ms model) and stays
# at 16 in flight (~0.1), where not batching would nearly double the requests.
MIN_EXPECTED_ARRIVALS = 0.05


class BatchingEmbedder:
    def __init__(self, inner: Embedder, max_wait_s: float, max_batch: int = BATCH_SIZE) -> None:
        self._inner = inner
        self._max_wait_s = max_wait_s
        self._max_batch = max_batch
        self._pending: Waiters = {}
        self._timer: asyncio.TimerHandle | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self.arrivals = ArrivalRate()  # of calls
        self.model = inner.model

    async def dimensions(self) -> int:
        return await self._inner.dimensions()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        self.arrivals.note(loop.time())
        futures = [self._enqueue(loop, text) for text in texts]
        if len(self._pending) >= self._max_batch or not self._company_likely():
            self._flush()
        elif futures and self._timer is None:
            self._timer = loop.call_later(self._max_wait_s, self._flush)
        return list(await asyncio.gather(*futures))

    def _company_likely(self) -> bool:
        if self._timer is not None:  # a batch is already waiting: join it
            return True
        return self.arrivals.expected_within(self._max_wait_s) >= MIN_EXPECTED_ARRIVALS

    def _enqueue(self, loop: asyncio.AbstractEventLoop, text: str) -> asyncio.Future[list[float]]:
        future: asyncio.Future[list[float]] = loop.create_future()
        self._pending.setdefault(text, []).append(future)
        return future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, {}
        if batch:
            request = asyncio.create_task(self._request(batch))
            self._requests.add(request)
            request.add_done_callback(self._requests.discard)

    async def _request(self, batch: Waiters) -> None:
        try:
            vectors = await self._inner.embed(list(batch))
        except EmbeddingInputRejected as error:
            if len(batch) == 1:
                _fail(batch, error)
            else:
                await asyncio.gather(*(self._request({t: f}) for t, f in batch.items()))
            return
        except Exception as error:
            _fail(batch, error)
            return
        for vector, futures in zip(vectors, batch.values(), strict=True):
            for future in futures:
                if not future.done():
                    future.set_result(vector)


def _fail(batch: Waiters, error: Exception) -> None:
    for futures in batch.values():
        for future in futures:
            if not future.done():  # a caller that gave up has cancelled its own
                future.set_exception(error)
