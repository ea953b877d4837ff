"""A conversation through a bus, one event at a time: what a user says, its answer awaited,
and the directive that makes the local model store a memory. Shared by the tests that read
back what the worker made of it (explanations, the operator console), on the emulator's bus
or the in-memory one alike."""

from __future__ import annotations

import json
from typing import Any, Protocol

from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.prompt_events import prompt_event


class Conversing(Protocol):
    """What :func:`say` needs of a bus (:class:`~llm_bot_tools.devstack.worker_harness.Bus`,
    :class:`~tests.support.memory_bus.MemoryBus`)."""

    @property
    def egress_topic(self) -> str: ...

    def tap(self, topic: str) -> Any: ...

    def publish_event(self, event: InternalEventV2, ordering_key: str = "") -> None: ...


def upsert(content: str, key: str | None = None) -> str:
    """The scripted model's directive to call ``upsertMemory`` with ``content`` (and ``key``)."""
    arguments = {"content": content, **({"key": key} if key else {})}
    return f"[[tool:upsertMemory {json.dumps(arguments)}]]"


async def say(bus: Conversing, user: str, text: str, *, thread: str, dm: bool) -> str:
    """Publish one event, await its answer; its correlation id."""
    egress = bus.tap(bus.egress_topic)
    event = prompt_event(text, user=user, thread=thread, egress_topic=bus.egress_topic)
    if dm:
        event.egress.type = "dm"
    bus.publish_event(event)
    await egress.take(1, timeout_s=60)
    return event.correlation_id
