"""The tools the model may call on memory: ``upsertMemory`` saves or updates a lasting fact,
``deleteMemory`` forgets one.

The model supplies only ``content``, optional flat ``metadata`` and, to update or delete, a
``key`` it was shown (in brackets before each of the ``Relevant memories``); the user comes
from the graph (see :mod:`llm_bot.graph.tool_round`), so a key is only ever looked up in that
user's namespace. A rule broken by the model, or a key it does not have, comes back to it as a tool
result it can act on. The write itself is recorded in the run's :class:`RunWrites` and applied
at the event's commit.

The tools see and touch only what the conversation may see: in a shared channel, a memory
learned in a DM is "no memory with key" to them, exactly as a key that does not exist (the
answer never tells that it exists), and a near-duplicate is looked for only among memories of
the same scope. A key the model was not shown is refused, never created: keys are ours.
Writes are bounded per event (:meth:`RunWrites.refusal`) and per user (``max_memories``,
``RETENTION_MEMORIES_PER_USER``): a new memory beyond the user's cap is refused, and the model
is told to update or forget one, so a flood never pushes out the facts the user gave first.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.run_writes import MemoryPut, RunWrites
from llm_bot.memory.store import MemoryStore, UserMemories
from llm_bot.memory.validation import (
    MAX_METADATA_KEYS,
    InvalidMemory,
    is_safe_key,
    new_key,
    validate_memory,
)

logger = logging.getLogger(__name__)


class MemoryTool(Protocol):
    """A memory tool as the tool round's runner (:mod:`llm_bot.graph.tool_round`) calls it: on
    the run's writes, for the run's user alone. A platform tool has its own protocol
    (:class:`llm_bot.platform_tools.platform.PlatformTool`)."""

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
    """``max_memories`` 0 sets no cap."""

    spec = UPSERT_MEMORY

    def __init__(self, store: MemoryStore, max_tokens: int, max_memories: int) -> None:
        self._store = store
        self._max_tokens = max_tokens
        self._max_memories = max_memories

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str:
        refusal = run.refusal()
        if refusal is not None:
            return refusal
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
        memories = self._store.for_user(run.user_id)
        key = key or run.key_of(content)  # saved earlier in this run: not in the store yet
        if key is not None and not await _visible(memories, key, run):
            return f"error: memory not saved: no memory with key {key}; omit the key for a new one"
        key, effect = await memories.resolve_key(content, key, run.visibility)
        if effect == "merged" and key in run.memory_deletes:  # forgotten: not a twin any more
            key, effect = new_key(), "created"
        if effect == "created" and not run.puts_key(key) and await self._full(memories, run):
            return (
                f"error: memory not saved: this user has {self._max_memories} memories, the most"
                " kept; update one you were shown (pass its key) or forget one first"
            )
        run.put_memory(MemoryPut(key, content, metadata, new=effect == "created"))
        logger.info("memory saved", extra={"userId": run.user_id, "key": key, "effect": effect})
        return f"saved memory {key} ({effect})"

    async def _full(self, memories: UserMemories, run: RunWrites) -> bool:
        if not self._max_memories:
            return False
        new_in_run = sum(1 for put in run.memory_puts if put.new)
        return await memories.count() + new_in_run >= self._max_memories


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
        if not is_safe_key(key):
            return "error: nothing deleted: key must be the key of a memory you were shown"
        if key in run.memory_deletes or not await _visible(
            self._store.for_user(run.user_id), key, run
        ):
            logger.info("memory not deleted", extra={"userId": run.user_id, "key": key})
            return f"error: no memory with key {key}; nothing deleted"
        refusal = run.refusal()
        if refusal is not None:
            return refusal
        run.delete_memory(key)
        logger.info("memory deleted", extra={"userId": run.user_id, "key": key})
        return f"deleted memory {key}"


async def _visible(memories: UserMemories, key: str, run: RunWrites) -> bool:
    """Whether ``key`` names a memory this run may touch: one it writes itself, or one in the
    store that its conversation may see."""
    if run.puts_key(key):
        return True
    memory = await memories.get(key)
    return memory is not None and memory.visible_in(run.visibility)
