"""`llm-bot send` over the real emulator: the event lands on the input topic as the wire format."""

from __future__ import annotations

import json

import pytest

from llm_bot.cli import main
from llm_bot.local.pubsub_emulator import PubSubEmulator

pytestmark = pytest.mark.integration


def test_send_publishes_the_prompt_event_and_reports_no_answer_without_a_worker(
    pubsub_emulator: PubSubEmulator,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topology = pubsub_emulator.create_topology(
        input_topic=f"{unique_name}-in",
        subscription=f"{unique_name}-sub",
        deadletter_topic=f"{unique_name}-dlq",
        output_topics=[f"{unique_name}-egress"],
    )
    for name, value in pubsub_emulator.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LLM_BOT_INPUT_TOPIC", f"{unique_name}-in")
    reply = f"{unique_name}-egress-tap"
    argv = ["send", "hello", "--user", "u-7", "--thread", "lobby", "--timeout", "1"]
    assert main([*argv, "--reply-subscription", reply]) == 1
    assert "no answer on" in capsys.readouterr().err

    clients = pubsub_emulator.clients()
    try:
        pulled = clients.subscriber.pull(
            subscription=topology.input_subscription, max_messages=1, timeout=30
        )
    finally:
        clients.close()
    (received,) = pulled.received_messages
    event = json.loads(received.message.data)
    assert received.message.attributes["correlationId"] == event["correlationId"]
    assert event["message"]["text"] == "hello"
    assert event["annotations"][0]["kind"] == "instruction"
    assert event["identity"]["user"]["id"] == "u-7"
    assert event["routing"]["slip"] == [{"id": "llm-bot", "status": "PENDING", "attempt": 0}]
