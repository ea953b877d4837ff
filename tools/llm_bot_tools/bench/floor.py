"""``llm-bot bench floor``: the CPU each library the worker is built on costs for its part of
one event, measured alone, so the worker's CPU per event can be set against what it cannot go
below while it keeps those libraries.

Each operation runs the way the worker runs it, 16 at a time on uvloop, and is timed on the
event loop's thread (``time.thread_time``: the local model server's threads in this process
are not counted). The Pub/Sub client works in threads of its own, so its part (pull and ack
one message, publish one) is the process's CPU over a drain, with nothing else running in it.

- ``graph``: LangGraph running a graph of the worker's shape (four supersteps, routing by
  ``Command``) whose nodes do nothing.
- ``model call``: one chat completion through the ``openai`` client as
  :mod:`llm_bot.llm.client` sends it; ``model call, aiohttp alone``: the same exchange on
  aiohttp without the client (the transport's share of it).
- ``embeddings call``: one embeddings request as :mod:`llm_bot.llm.embeddings` sends it.
- ``statement``: a connection borrowed from psycopg's pool and one one-row statement.
- ``pubsub``: one event's pull, ack and publish through google-cloud-pubsub and the emulator.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, TypedDict
from uuid import uuid4

import aiohttp
import uvloop
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool

from llm_bot.llm import openai_format
from llm_bot.llm.http import PLACEHOLDER_KEY, openai_client
from llm_bot_tools.bench.load import Arrivals, Progress, bench_events, publish_all
from llm_bot_tools.bench.service import Stack
from llm_bot_tools.devstack.worker_harness import Bus

CHAT, EMBEDDINGS = "/chat/completions", "/embeddings"  # under the client's base URL
CONCURRENCY = 16
WARM_UP = 50
MESSAGES = [
    {"role": "system", "content": "You are a helpful bot on a chat platform. " * 20},
    {"role": "user", "content": "what should I remember about tea, jazz and chess?"},
]


@dataclass(frozen=True)
class FloorReport:
    operation: str
    cpu_ms: float  # per operation
    operations_per_s: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def run_floor_bench(stack: Stack, count: int, progress: Progress) -> list[FloorReport]:
    """``count`` operations of each kind, after a warm-up."""
    reports = uvloop.run(_library_calls(stack, stack.postgres.url, count, progress))
    reports.append(_pubsub(stack, count, progress))
    return reports


async def _library_calls(
    stack: Stack, database_url: str, count: int, progress: Progress
) -> list[FloorReport]:
    model = stack.model
    client = openai_client(None, model.base_url, 30.0)
    chat = {"model": model.model, "messages": MESSAGES}
    embeddings = {"model": "text-embedding-3-small", "input": [MESSAGES[1]["content"]]}

    def raw_post(path: str, body: dict[str, Any]) -> Callable[[], Awaitable[object]]:
        options = openai_format.RAW_REQUEST_OPTIONS
        return lambda: client.post(path, body=body, cast_to=bytes, options=options)

    reports = [await _measure("graph", _noop_graph(), count, progress)]
    try:
        reports.append(await _measure("model call", raw_post(CHAT, chat), count, progress))
        reports.append(
            await _measure("embeddings call", raw_post(EMBEDDINGS, embeddings), count, progress)
        )
    finally:
        await client.close()
    async with aiohttp.ClientSession() as session:
        url, data = f"{model.base_url}{CHAT}", json.dumps(chat)
        headers = {"Authorization": f"Bearer {PLACEHOLDER_KEY}"}

        async def aiohttp_post() -> bytes:
            async with session.post(url, data=data, headers=headers) as response:
                return await response.read()

        reports.append(await _measure("model call, aiohttp alone", aiohttp_post, count, progress))
    async with AsyncConnectionPool(database_url, min_size=4, max_size=8) as pool:

        async def statement() -> None:
            async with pool.connection() as connection:
                await connection.execute("SELECT %s::text, now()", ("one row",))

        reports.append(await _measure("statement", statement, count, progress))
    return reports


async def _measure(
    operation: str, call: Callable[[], Awaitable[object]], count: int, progress: Progress
) -> FloorReport:
    async def calls(share: int) -> None:
        for _ in range(share):
            await call()

    for _ in range(WARM_UP):
        await call()
    shares = [count // CONCURRENCY + (i < count % CONCURRENCY) for i in range(CONCURRENCY)]
    cpu, wall = time.thread_time(), time.perf_counter()
    await asyncio.gather(*(calls(share) for share in shares))
    report = FloorReport(
        operation,
        (time.thread_time() - cpu) * 1000 / count,
        count / (time.perf_counter() - wall),
    )
    progress(f"{operation}: {report.cpu_ms:.3f} ms of CPU each")
    return report


class _State(TypedDict, total=False):
    event: int
    candidate: int


def _noop_graph() -> Callable[[], Awaitable[object]]:
    async def ingest_prompt(state: _State) -> Command[Any]:
        return Command(goto="retrieve_memories")

    async def retrieve_memories(state: _State) -> dict[str, Any]:
        return {}

    async def call_model(state: _State) -> Command[Any]:
        return Command(goto="build_candidate")

    async def build_candidate(state: _State) -> dict[str, Any]:
        return {"candidate": state["event"]}

    graph: StateGraph[_State, None, _State, _State] = StateGraph(_State)
    graph.add_node("ingest_prompt", ingest_prompt)
    graph.add_node("retrieve_memories", retrieve_memories)
    graph.add_node("call_model", call_model)
    graph.add_node("build_candidate", build_candidate)
    graph.add_edge(START, "ingest_prompt")
    graph.add_edge("retrieve_memories", "call_model")
    graph.add_edge("build_candidate", END)
    compiled = graph.compile()
    return lambda: compiled.ainvoke({"event": 1})


def _pubsub(stack: Stack, count: int, progress: Progress) -> FloorReport:
    """Pull and ack ``count`` waiting events, then publish as many: the transport's CPU."""
    prefix = f"floor{uuid4().hex[:8]}"
    bus = Bus(stack.emulator, prefix, {})
    try:
        events = bench_events(prefix, count, 100, 200, "unused")
        publish_all(bus.clients.publisher, bus.topology.input_topic, events)
        cpu, wall = time.process_time(), time.perf_counter()
        consumer = Arrivals(bus.clients.subscriber, bus.topology.input_subscription, CONCURRENCY)
        consumer.start()
        try:
            consumer.wait_for([e.correlation_id for e in events], 300, progress, "pubsub pull")
        finally:
            consumer.stop()
        output = bus.topology.output_topics[bus.egress_topic]
        publish_all(bus.clients.publisher, output, events)
        elapsed = time.perf_counter() - wall
        report = FloorReport("pubsub", (time.process_time() - cpu) * 1000 / count, count / elapsed)
    finally:
        bus.close()
    progress(f"pubsub: {report.cpu_ms:.3f} ms of CPU per event")
    return report
