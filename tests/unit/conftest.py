"""What the unit tests share: the local model server, for tests of the model client and the
graph over real HTTP (one per module, started only where a test asks for it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_bot_tools.local.openai_server import LocalModelServer


@pytest.fixture(scope="module")
def server() -> Iterator[LocalModelServer]:
    with LocalModelServer() as running:
        yield running


@pytest.fixture
def fresh_server(server: LocalModelServer) -> LocalModelServer:
    """The module's server with no script, failure or recorded request of another test."""
    server.reset()
    return server
