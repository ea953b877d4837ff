"""Model access: the OpenAI-compatible client wrapper, embeddings, retry policies."""

from llm_bot.llm.client import ModelClient
from llm_bot.llm.embedding_batch import BatchingEmbedder
from llm_bot.llm.embeddings import (
    CachingEmbedder,
    Embedder,
    EmbeddingError,
    EmbeddingInputRejected,
    embedder_from_settings,
)
from llm_bot.llm.errors import ModelError
from llm_bot.llm.messages import ChatMessage, ModelReply, ToolCall, ToolSpec

__all__ = [
    "BatchingEmbedder",
    "CachingEmbedder",
    "ChatMessage",
    "Embedder",
    "EmbeddingError",
    "EmbeddingInputRejected",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ToolCall",
    "ToolSpec",
    "embedder_from_settings",
]
