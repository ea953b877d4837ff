"""``llm-bot send`` against a running worker whose answer is slow: BitBrat's "🤔 Thinking about
your request..." reaches the egress tap first, and send shows it and acks it instead of handing
it back to the tap again and again. What the handler sends and when is tested in
``tests/integration/handler/test_progress.py``."""

from __future__ import annotations

import asyncio

import pytest

from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot_tools.devstack.send import SendRequest, send_and_wait
from llm_bot_tools.devstack.worker_harness import Tap, running_worker
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator

from ..conftest import BusFactory

pytestmark = pytest.mark.integration

SLOW_S = 1.0  # five times the progress delay: the timer fires well inside the model call
THINKING = "🤔 Thinking about your request..."


async def test_llm_bot_send_shows_the_progress_message_and_takes_it_off_the_tap(
    make_bus: BusFactory,
    migrated_database_url: str,
    unique_name: str,
    pubsub_emulator: PubSubEmulator,
    model_server: LocalModelServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = {
        "BUS_PREFIX": f"{unique_name}-",  # the bus's own topics already start with it
        "LLM_BOT_PROGRESS_AFTER_MS": "200",
        "LLM_BOT_SHUTDOWN_GRACE_S": "1",
        # Over the harness's short model timeouts: a slow answer is slow, not a retry.
        "OPENAI_TIMEOUT_MS": "30000",
        "LLM_BOT_MODEL_DEADLINE_MS": "30000",
    }
    bus = make_bus(migrated_database_url, settings, max_delivery_attempts=100)
    topic = f"{bus.prefix}-{DEFAULT_EGRESS_TOPIC}"  # where both the progress and reply go
    topology = pubsub_emulator.create_topology(  # the bus's topics exist and are kept
        input_topic=f"{bus.prefix}-in",
        subscription=f"{bus.prefix}-sub",
        deadletter_topic=f"{bus.prefix}-dlq",
        output_topics=[topic],
    )
    egress = Tap(bus.clients.subscriber, topology.output_subscriptions[topic])
    # send's clients find the emulator as the command's do, in the environment
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", bus.environment["PUBSUB_EMULATOR_HOST"])
    event = prompt_event(
        "take your time", user="u-1", thread="lobby", egress_topic=DEFAULT_EGRESS_TOPIC
    )
    model_server.hang_next(1, SLOW_S)
    worker_settings = bus.settings()
    reply_subscription = egress.subscription_path.rsplit("/", 1)[-1]
    async with running_worker(worker_settings):
        request = SendRequest(event, reply_subscription, timeout_s=60)
        answer = await asyncio.to_thread(send_and_wait, worker_settings, request)
    assert answer["correlationId"] == event.correlation_id
    assert capsys.readouterr().err.count(THINKING) == 1
    assert await egress.drain() == []
