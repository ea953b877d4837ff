"""Postgres plumbing that is not memory: migrations, the connection pools, the group committer,
the processed-events ledger, the embedding space, binary vectors and throw-away schemas for
measurements."""

from llm_bot.db.embedding_space import EmbeddingModelMismatch
from llm_bot.db.group_commit import GroupCommitter, Work
from llm_bot.db.migrate import migrate
from llm_bot.db.pools import open_pool
from llm_bot.db.processed_events import (
    Claim,
    EventKey,
    Published,
    StoredOutput,
    claim_or_wait,
    key_of,
    source_of,
)
from llm_bot.db.schemas import scratch_schema
from llm_bot.db.vectors import vector_param

__all__ = [
    "Claim",
    "EmbeddingModelMismatch",
    "EventKey",
    "GroupCommitter",
    "Published",
    "StoredOutput",
    "Work",
    "claim_or_wait",
    "key_of",
    "migrate",
    "open_pool",
    "scratch_schema",
    "source_of",
    "vector_param",
]
