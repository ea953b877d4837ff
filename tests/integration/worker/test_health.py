"""Health endpoints and `llm-bot check` against a running worker, and without one."""

from __future__ import annotations

import asyncio
import http.client

import pytest

from llm_bot.cli import main
from llm_bot_tools.devstack.worker_harness import Bus, readyz, running_worker

pytestmark = pytest.mark.integration


def get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


async def test_health_ready_and_check_follow_the_worker(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker serves on this loop, so every client call runs in a thread."""
    settings = bus.settings()
    monkeypatch.setenv("PORT", str(settings.port))
    async with running_worker(settings):
        assert await asyncio.to_thread(get, settings.port, "/healthz") == 200
        assert await asyncio.to_thread(get, settings.port, "/livez") == 200  # BitBrat's name
        assert await asyncio.to_thread(readyz, settings.port) == 200
        # The names that pass Google's front end (`gcloud run services proxy`), which keeps
        # some paths ending in z for itself.
        assert await asyncio.to_thread(get, settings.port, "/live") == 200
        assert await asyncio.to_thread(get, settings.port, "/ready") == 200
        assert await asyncio.to_thread(get, settings.port, "/nowhere") == 404
        assert await asyncio.to_thread(main, ["check"]) == 0
    assert readyz(settings.port) is None
    assert main(["check"]) == 1
    assert "not ready" in capsys.readouterr().out
