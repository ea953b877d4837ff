"""A neighbour's huge prompt and another user's ordinary event, both answered: a 40,000-word
(360 kB) prompt and a "hello" of another user in the same channel, published together to a
running worker (a child process, the local model server, the local embedding model as
``llm-bot dev`` runs it, Postgres). How long the "hello" waited is a measurement, not an
assertion: both times are printed (``pytest -s``) and reported in docs/performance.md."""

from __future__ import annotations

import json
import random
import string
import time
from pathlib import Path

import pytest

from llm_bot_tools.devstack.worker_harness import Bus, WorkerProcess
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = [
    pytest.mark.integration,
    pytest.mark.not_on_citus("the neighbour's wait is the worker's, not the database's"),
]

WORDS = 40_000


def huge_prompt() -> str:
    """40,000 different-looking eight-letter words: 360,000 bytes."""
    draw = random.Random(37)
    return " ".join("".join(draw.choices(string.ascii_lowercase, k=8)) for _ in range(WORDS)) + " "


async def test_a_360_kb_prompt_and_a_neighbours_hello_are_both_answered(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    egress = bus.tap(bus.egress_topic)
    environment = bus.worker_environment(MEMORY_EMBEDDING_PROVIDER="local")  # as `llm-bot dev`
    worker = WorkerProcess(environment, tmp_path / "worker.log").start()
    try:
        warm = prompt_event("warm up", user="carol", thread="c", egress_topic=bus.egress_topic)
        bus.publish_event(warm)  # the embedding model and the pools are loaded
        await egress.take(1, timeout_s=120)
        text = huge_prompt()
        assert len(text.encode()) == 360_000
        huge = prompt_event(text, user="mallory", thread="room", egress_topic=bus.egress_topic)
        hello = prompt_event("hello", user="alice", thread="room", egress_topic=bus.egress_topic)
        bus.publish_event(huge)
        bus.publish_event(hello)
        published = time.monotonic()
        answered: dict[str, float] = {}
        while len(answered) < 2:
            [message] = await egress.take(1, timeout_s=120)
            answered[json.loads(message.data)["correlationId"]] = time.monotonic() - published
    finally:
        worker.kill()
    print(
        f"hello answered after {answered[hello.correlation_id]:.2f} s,"
        f" the 360 kB prompt after {answered[huge.correlation_id]:.2f} s"
    )
    assert set(answered) == {hello.correlation_id, huge.correlation_id}
