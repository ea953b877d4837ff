"""`llm-bot send` over the real emulator: the event lands on the input topic as the wire format."""

from __future__ import annotations

import json

import pytest
from google.api_core.exceptions import DeadlineExceeded

from llm_bot.cli import main
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator

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


@pytest.mark.parametrize(
    ("prefixed", "argument", "expected"),
    [
        (True, None, "{prefix}internal.egress.v1-tap"),
        (True, "answers", "{prefix}answers"),
        (False, "{unique}-answers", "{unique}-answers"),
    ],
    ids=["default-with-prefix", "named-with-prefix", "named-without-prefix"],
)
def test_a_missing_reply_subscription_is_one_line_and_nothing_is_sent(
    pubsub_emulator: PubSubEmulator,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    prefixed: bool,
    argument: str | None,
    expected: str,
) -> None:
    """On real Pub/Sub nothing makes the default tap (only `llm-bot dev` does): the operator
    gets the subscription's name, BUS_PREFIX in front as the worker's topics have it, and the
    command that creates it, instead of a traceback. (The prefix is unique per test, since the
    emulator is shared.)"""
    prefix = f"{unique_name}." if prefixed else ""
    expected = expected.format(prefix=prefix, unique=unique_name)
    if argument is not None:
        argument = argument.format(unique=unique_name)
    topology = pubsub_emulator.create_topology(
        input_topic=f"{prefix}{unique_name}-in",
        subscription=f"{prefix}{unique_name}-sub",
        deadletter_topic=f"{prefix}{unique_name}-dlq",
        output_topics=[],
    )
    for name, value in pubsub_emulator.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BUS_PREFIX", prefix)
    monkeypatch.setenv("LLM_BOT_INPUT_TOPIC", f"{unique_name}-in")
    argv = ["send", "hello", "--user", "u-7", "--thread", "lobby", "--timeout", "1"]
    if argument is not None:
        argv += ["--reply-subscription", argument]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"llm-bot: error: reply subscription {expected} does not exist")
    assert f"--topic={prefix}internal.egress.v1" in line

    clients = pubsub_emulator.clients()
    try:
        # A message would come at once; an empty pull waits until a second before the deadline.
        pulled = clients.subscriber.pull(
            subscription=topology.input_subscription, max_messages=1, timeout=1.5
        )
    except DeadlineExceeded:
        pulled = None
    finally:
        clients.close()
    assert pulled is None or not pulled.received_messages, "nothing was published"
