"""An embedder on the module's local model server, its request record cleared first."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from llm_bot.llm.embeddings import OpenAIEmbedder
from llm_bot_tools.local.openai_server import LocalModelServer

from ..conftest import server_embedder


@pytest.fixture
async def inner(embedding_server: LocalModelServer) -> AsyncIterator[OpenAIEmbedder]:
    embedding_server.reset()
    embedder = server_embedder(embedding_server)
    yield embedder
    await embedder.close()
