"""``LLM_BOT_EVENT_LOOP``: the worker runs on uvloop unless asyncio's loop is asked for."""

from __future__ import annotations

import asyncio

import uvloop

from llm_bot.cli.worker import event_loop_factory


def test_uvloop_by_default_and_asyncio_when_asked() -> None:
    factory = event_loop_factory("uvloop")
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)
    assert event_loop_factory("asyncio") is None  # asyncio.Runner's own default
