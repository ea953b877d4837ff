"""Node ``retrieve_memories``: what the memory layers know, or nothing, never fail.

Memory makes answers better but is not needed for an answer, so a slow or broken memory layer
costs the event its memories (logged with the user and the cause), not its reply.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from langgraph.runtime import Runtime

from llm_bot.explanation.record import (
    ContextSources,
    MemorySource,
    Scores,
    TurnSource,
    text_hash,
)
from llm_bot.graph.state import GraphContext, GraphState
from llm_bot.memory.retrieval import MemoryContext

logger = logging.getLogger(__name__)


async def retrieve_memories(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
    context = runtime.context
    inbound = state["inbound"]
    try:
        async with asyncio.timeout(context.retrieval_timeout_s):
            memory_context = await context.retriever.retrieve(
                inbound.user_id,
                inbound.thread_id,
                state["combined_prompt"],
                private=state["writes"].visibility == "dm",
                asked_at=inbound.asked_at,
            )
    except Exception as error:  # degrade, never fail: docs/memory.md, Retrieval
        cause = "timeout" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}"
        logger.warning(
            "memory retrieval failed, continuing without memories",
            extra={"userId": inbound.user_id, "cause": cause},
        )
        memory_context = MemoryContext(stats={"retrievalFailed": 1})
    state["writes"].index_turns = memory_context.deep
    update: dict[str, Any] = {"memory_context": memory_context}
    if "explanation" in state:
        update["explanation"] = replace(state["explanation"], context=sources_of(memory_context))
    return update


def sources_of(memory_context: MemoryContext) -> ContextSources:
    """What the memory context cites, as an explanation records it: ids, scores and hashes of
    the texts sent, never the texts."""
    chosen = memory_context  # what assembly gave the model, and what it left out
    return ContextSources(
        notes_hash=text_hash(chosen.notes) if chosen.notes else None,
        memories=tuple(
            MemorySource(
                hit.key,
                hit.updated_at,
                text_hash(hit.content),
                Scores(hit.dense_rank, hit.lexical_rank, hit.similarity, hit.fused_score),
            )
            for hit in chosen.memories
        ),
        recalled=tuple(
            TurnSource(
                turn.thread_id,
                turn.seq,
                Scores(turn.dense_rank, turn.lexical_rank, turn.similarity, turn.fused_score),
                turn.replaces,
                turn.replaced_by,
            )
            for turn in chosen.recalled
        ),
        window=tuple(TurnSource(turn.thread_id, turn.seq) for turn in chosen.window),
        left_out=chosen.left_out,
        failed=memory_context.stats.get("retrievalFailed", 0),
    )
