"""Make a fresh prompt event, the way an upstream router would, for the CLI, tests and benches."""

from __future__ import annotations

from datetime import datetime
from uuid import uuid4

from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.events.models import SOURCE, InternalEventV2

# What a BitBrat routing rule asks of llm-bot for a chat message; the user's words are the text.
INSTRUCTION = "Create an appropriate answer to the user's latest message."
CLI_CONNECTOR = "cli"
CLI_SOURCE = f"{SOURCE}.cli"


def prompt_event(
    text: str,
    *,
    user: str,
    thread: str,
    egress_topic: str,
    correlation_id: str | None = None,
    now: datetime | None = None,
    personality: str | None = None,
) -> InternalEventV2:
    """A ``chat.message.v1`` from ``user`` in channel ``thread`` whose slip holds one PENDING
    llm-bot step, so the processed event goes to ``egress_topic``."""
    at = iso_timestamp(now or utc_now())
    correlation = correlation_id or str(uuid4())
    return InternalEventV2.model_validate(
        {
            "v": "2",
            "correlationId": correlation,
            "type": "chat.message.v1",
            "ingress": {
                "ingressAt": at,
                "source": CLI_SOURCE,
                "connector": CLI_CONNECTOR,
                "channel": thread,
            },
            "identity": {"external": {"id": user, "platform": CLI_CONNECTOR}, "user": {"id": user}},
            "egress": {
                "destination": egress_topic,
                "type": "chat",
                "connector": CLI_CONNECTOR,
                "channel": thread,
            },
            "message": {"id": f"msg-{correlation}", "role": "user", "text": text},
            "annotations": [
                {
                    "id": f"instruction-{correlation}",
                    "kind": "instruction",
                    "source": CLI_SOURCE,
                    "createdAt": at,
                    "value": INSTRUCTION,
                },
                *(
                    [
                        {
                            "id": f"personality-{correlation}",
                            "kind": "personality",
                            "source": CLI_SOURCE,
                            "createdAt": at,
                            "payload": {"text": personality},
                        }
                    ]
                    if personality
                    else []
                ),
            ],
            "routing": {
                "stage": "response",
                "slip": [{"id": SOURCE, "status": "PENDING", "attempt": 0}],
                "history": [],
            },
        }
    )
