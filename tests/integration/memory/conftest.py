"""What the graph tests of this folder share."""

from __future__ import annotations

import pytest

from llm_bot.local.openai_server import LocalModelServer


@pytest.fixture
def fresh_servers(chat_server: LocalModelServer, embedding_server: LocalModelServer) -> None:
    """The module's model servers with no script, failure or recorded request of another test."""
    chat_server.reset()
    embedding_server.reset()
