"""Apply one event's writes inside the caller's transaction: memories, notes, history pair.

The worker calls :meth:`MemoryCommit.apply` in the transaction that also stores the
processed-event record, so the three either all happen or none do. Embeddings of the pair are
made before the transaction (a network call has no place inside one); if embedding fails the
pair is stored without vectors: it shows in windows but recall cannot find it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from llm_bot.memory.history import PairToWrite, write_pair
from llm_bot.memory.namespaces import user_namespace
from llm_bot.memory.notes_store import write_notes
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.store import MemoryStore, memory_value

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnOutcome:
    """What a processed event leaves behind, as the commit needs it."""

    source_event: str
    thread_id: str
    user_id: str
    prompt: str
    reply: str
    at: datetime
    writes: RunWrites | None


class MemoryCommit:
    def __init__(self, store: MemoryStore, agent: str, idle: timedelta) -> None:
        self._store = store
        self._agent = agent
        self._idle = idle

    async def prepare(self, turn: TurnOutcome) -> PairToWrite:
        """The history pair with its embeddings, computed outside any transaction."""
        vectors: list[list[float]] | list[None] = [None, None]
        try:
            vectors = await self._store.embedder.embed([turn.prompt, turn.reply])
        except Exception as error:  # recall degrades; the turn is still recorded
            logger.warning(
                "could not embed the turn; stored without vectors",
                extra={"userId": turn.user_id, "cause": f"{type(error).__name__}: {error}"},
            )
        return PairToWrite(
            turn.thread_id,
            turn.user_id,
            turn.prompt,
            turn.reply,
            turn.at,
            turn.source_event,
            vectors[0],
            vectors[1],
        )

    async def apply(
        self, connection: AsyncConnection[Any], turn: TurnOutcome, pair: PairToWrite
    ) -> None:
        writes = turn.writes
        if writes is not None and writes.memory_puts:
            on_connection = self._store.store_on(connection)
            namespace = user_namespace(writes.user_id)
            for put in writes.memory_puts:
                value = memory_value(put.content, put.metadata)
                await on_connection.aput(namespace, put.key, value, index=["content"])
        if writes is not None and writes.notes_changed and writes.notes is not None:
            await write_notes(connection, writes.user_id, self._agent, writes.notes)
        await write_pair(connection, pair, self._idle)

    async def commit_now(self, turn: TurnOutcome) -> None:
        """Prepare and apply in a transaction of its own (``send --local``, tests)."""
        pair = await self.prepare(turn)
        async with self._store.connection() as connection, connection.transaction():
            await self.apply(connection, turn, pair)
