"""A personality named by a rule (``{"kind": "personality", "value": "<bot name>"}``, as
BitBrat's ``brat setup`` writes it) through the handler: the stored text of its highest
active version becomes the assistant's identity and its model answers."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from llm_bot.events.codec import encode
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration

LURK = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat" / "personalities"


async def test_a_named_personality_becomes_the_assistant_identity(
    bus: MemoryBus, model_server: LocalModelServer
) -> None:
    lurk = json.loads((LURK / "lurk_personality.json").read_text())
    url = bus.environment["DATABASE_URL"]
    with psycopg.connect(url) as connection:
        connection.execute(
            "INSERT INTO personalities (name, version, status, text, model) VALUES"
            " ('lurk-master', 9, 'active', 'old text', NULL),"
            " ('lurk-master', 10, 'active', %s, 'lurk-model'),"
            " ('lurk-master', 11, 'inactive', 'not yet', NULL)",
            (lurk["text"],),
        )
    event = prompt_event("!lurk ", user="u1", thread="t1", egress_topic=bus.egress_topic)
    data, attributes = encode(event)
    document = json.loads(data)
    document["annotations"].append(
        {
            "id": "p1",
            "kind": "personality",
            "createdAt": document["ingress"]["ingressAt"],
            "value": "lurk-master",
        }
    )
    egress = bus.tap(bus.egress_topic)
    async with bus.serving(bus.settings()):
        bus.publish(json.dumps(document).encode(), attributes)
        (message,) = await egress.take(1, timeout_s=30)
    sent = model_server.chat_requests()[0]
    assert f"## [Assistant Identity]\n- {lurk['text']}" in sent["messages"][0]["content"]
    assert sent["model"] == "lurk-model"
    assert json.loads(message.data)["candidates"][-1]["source"] == "llm-bot"
