"""Hostile text through a running worker (a child process, so the test's own loop is free to
watch it): a notes line built to make a header regex backtrack, and a prompt of 24,000 "may",
each being worked on while a neighbour's event waits and ``/live`` is asked over and over.

The worker must answer both users, finish the notes operation, and answer every ``/live``
(each ask given 10 s: a bound only a loop blocked for seconds breaks; on the code before,
the notes operation held the loop for minutes and the "may" prompt for half a minute).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from pathlib import Path

import psycopg
import pytest
from google.pubsub_v1.types import PubsubMessage

from llm_bot.events.identity import user_id_of
from llm_bot_tools.devstack.worker_harness import Bus, Tap, WorkerProcess, health_status
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

pytestmark = pytest.mark.integration

LIVE_TIMEOUT_S = 10.0
HOSTILE_LINE = "# x" + " " * 7000 + "#####x"
NOTES = "# Food\nVegan.\n" + HOSTILE_LINE + "\n# Work\nBaker."
DELETE_WORK = (
    '[[tool:manage_long_term_memory {"operation": "delete_section_by_header", "header": "Work"}]]'
)


def ask_live_until(port: int, done: threading.Event) -> list[int | None]:
    """``/live`` asked again and again (a tenth of a second apart) until ``done``."""
    statuses = []
    while not done.is_set():
        statuses.append(health_status(port, "/live", LIVE_TIMEOUT_S))
        done.wait(0.1)
    return statuses


async def answers_while_asking_live(
    egress: Tap, count: int, port: int
) -> tuple[list[PubsubMessage], list[int | None]]:
    done = threading.Event()
    asking = asyncio.create_task(asyncio.to_thread(ask_live_until, port, done))
    try:
        answers = await egress.take(count, timeout_s=60)
    finally:
        done.set()
        statuses = await asking
    return answers, statuses


def correlation_ids(messages: list[PubsubMessage]) -> set[str]:
    return {json.loads(message.data)["correlationId"] for message in messages}


async def test_a_hostile_notes_line_stalls_no_one(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    egress = bus.tap(bus.egress_topic)
    worker = WorkerProcess(bus.worker_environment(), tmp_path / "worker.log").start()
    try:
        model_server.script_tool_call(
            "manage_long_term_memory", {"operation": "overwrite", "content": NOTES}
        )
        bus.publish_event(
            prompt_event("note this", user="mallory", thread="m", egress_topic=bus.egress_topic)
        )
        await egress.take(1, timeout_s=30)
        edit = prompt_event(DELETE_WORK, user="mallory", thread="m", egress_topic=bus.egress_topic)
        neighbour = prompt_event("hello", user="alice", thread="a", egress_topic=bus.egress_topic)
        bus.publish_event(edit)
        bus.publish_event(neighbour)
        answers, statuses = await answers_while_asking_live(egress, 2, worker.port)
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.log_tail()
    finally:
        worker.kill()
    assert correlation_ids(answers) == {edit.correlation_id, neighbour.correlation_id}
    assert set(statuses) == {200}  # asked at least once, answered every time
    with psycopg.connect(bus.environment["DATABASE_URL"]) as connection:
        row = connection.execute(
            "SELECT content FROM agent_notes WHERE user_id = %s", (user_id_of(edit),)
        ).fetchone()
    assert row == ("# Food\nVegan.\n" + HOSTILE_LINE,)  # the section operation completed


async def test_a_prompt_of_many_mays_stalls_no_one(
    bus: Bus, model_server: LocalModelServer, tmp_path: Path
) -> None:
    egress = bus.tap(bus.egress_topic)
    worker = WorkerProcess(bus.worker_environment(), tmp_path / "worker.log").start()
    try:
        # 96 KB: well within an event's size limit (LLM_BOT_MAX_MESSAGE_BYTES, 1 MB).
        mays = prompt_event(
            "may " * 24_000, user="mallory", thread="m", egress_topic=bus.egress_topic
        )
        neighbour = prompt_event("hello", user="alice", thread="a", egress_topic=bus.egress_topic)
        bus.publish_event(mays)
        bus.publish_event(neighbour)
        answers, statuses = await answers_while_asking_live(egress, 2, worker.port)
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.log_tail()
    finally:
        worker.kill()
    assert correlation_ids(answers) == {mays.correlation_id, neighbour.correlation_id}
    assert set(statuses) == {200}  # asked at least once, answered every time
