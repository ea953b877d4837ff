"""The tools the model may call on memory: ``upsertMemory`` saves or updates a lasting fact,
``deleteMemory`` forgets one.

The model supplies only ``content``, optional flat ``metadata`` and, to update or delete, a
``key`` it was shown (``- [key] content`` in ``Relevant memories``); the user comes from the
graph (see :mod:`llm_bot.graph.tools`), so a key is only ever looked up in that user's
namespace. A rule broken by the model, or a key it does not have, comes back to it as a tool
result it can act on. The write itself is recorded in the run's :class:`RunWrites` and applied
at the event's commit.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Protocol

from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.run_writes import MemoryPut, RunWrites
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.validation import (
    MAX_METADATA_KEYS,
    InvalidMemory,
    validate_memory,
)

logger = logging.getLogger(__name__)


class Tool(Protocol):
    """What the graph's tool runner (:mod:`llm_bot.graph.tools`) calls: every tool we offer
    the model reads or writes memory, so the protocol lives with them."""

    spec: ToolSpec

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str: ...


UPSERT_MEMORY = ToolSpec(
    name="upsertMemory",
    description=(
        "Save a lasting fact about the user (preferences, name, time zone, important dates,"
        " work). To correct a memory you were shown, pass its key; otherwise omit the key."
    ),
    parameters={
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The fact, as one short sentence."},
            "metadata": {
                "type": "object",
                "description": f"Up to {MAX_METADATA_KEYS} flat string labels, e.g. a category.",
                "additionalProperties": {"type": "string"},
            },
            "key": {"type": "string", "description": "Key of the memory to update."},
        },
        "required": ["content"],
    },
)


class UpsertMemoryTool:
    spec = UPSERT_MEMORY

    def __init__(self, store: MemoryStore, max_tokens: int) -> None:
        self._store = store
        self._max_tokens = max_tokens

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str:
        try:
            content, metadata, key = validate_memory(
                arguments.get("content"),
                arguments.get("metadata"),
                arguments.get("key"),
                self._max_tokens,
            )
        except InvalidMemory as error:
            logger.info("memory refused", extra={"userId": run.user_id, "cause": str(error)})
            return f"error: memory not saved: {error}"
        key, outcome = await self._store.for_user(run.user_id).resolve_key(content, key)
        if outcome == "merged" and key in run.memory_deletes:  # forgotten: not a twin any more
            key, outcome = str(uuid.uuid4()), "created"
        run.put_memory(MemoryPut(key, content, metadata))
        logger.info("memory saved", extra={"userId": run.user_id, "key": key, "outcome": outcome})
        return f"saved memory {key} ({outcome})"


DELETE_MEMORY = ToolSpec(
    name="deleteMemory",
    description=(
        "Forget a memory you were shown, when the user asks you to forget it or it is no longer"
        " true (to correct it instead, use upsertMemory with its key). Pass its key: the text in"
        " brackets before the memory."
    ),
    parameters={
        "type": "object",
        "properties": {"key": {"type": "string", "description": "Key of the memory to delete."}},
        "required": ["key"],
    },
)


class DeleteMemoryTool:
    """Only a key of this user's, in the store or written earlier in this run, is deleted;
    any other (another user's, made up, already deleted) is "no memory with key", which
    says nothing about whether it exists elsewhere."""

    spec = DELETE_MEMORY

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str:
        key = arguments.get("key")
        if not isinstance(key, str) or not key:
            return "error: nothing deleted: key must be the key of a memory you were shown"
        if key in run.memory_deletes or not (
            run.puts_key(key) or await self._store.for_user(run.user_id).get(key) is not None
        ):
            logger.info("memory not deleted", extra={"userId": run.user_id, "key": key})
            return f"error: no memory with key {key}; nothing deleted"
        run.delete_memory(key)
        logger.info("memory deleted", extra={"userId": run.user_id, "key": key})
        return f"deleted memory {key}"
