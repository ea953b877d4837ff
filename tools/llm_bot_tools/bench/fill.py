"""Rows for ``bench capacity`` that its events do not write, by the code that writes them.

- **History**: each bench user's earlier turns, so an event's recall reads a user as deep as
  the capacity model assumes (recall scans every turn of a typical user): loaded by binary
  COPY as the depth bench loads them (:func:`~llm_bot_tools.bench.depth.load_turns`), vectors
  of the run's size, in a DM thread of the user's own that the events do not write to.
- **Tool calls**: the capacity bench's model calls no platform tool, so ``tool_calls`` rows are
  written through the worker's own ledger
  (:class:`~llm_bot.platform_tools.ledger.PostgresToolLedger`), whose two statements are what a
  call writes.
"""

from __future__ import annotations

import asyncio

import numpy as np
from psycopg import AsyncConnection

from llm_bot.db.pools import open_pool
from llm_bot.platform_tools.calls import CallKey, ToolOutcome
from llm_bot.platform_tools.ledger import PostgresToolLedger
from llm_bot.settings import load_settings
from llm_bot_tools.bench.depth import Topics, load_turns
from llm_bot_tools.bench.load import Progress

# A tool call as a platform tool's might be: a short argument object and a one-line answer.
TOOL_ARGUMENTS = {"channel": "#general", "text": "Welcome to the stream, enjoy your stay!"}
TOOL_ANSWER = "Message sent to #general (id 1234567890123456789)."
TOOL_ID = "discord.send_message"
STEP_KEY = "llm-bot"
LEDGER_CONCURRENCY = 16


def fill_history(
    url: str, users: int, turns_per_user: int, dimensions: int, progress: Progress
) -> None:
    """``turns_per_user`` turns for each of ``user-0`` to ``user-{users - 1}``, vacuumed."""
    progress(f"history: {turns_per_user} turns for each of {users} users, {dimensions} dimensions")
    asyncio.run(_load_history(url, users, turns_per_user, dimensions, progress))


async def _load_history(
    url: str, users: int, turns_per_user: int, dimensions: int, progress: Progress
) -> None:
    def owner(pair: int) -> str:
        return f"user-{pair % users}"

    def thread(pair: int) -> str:
        return f"cli:history:{owner(pair)}"  # a DM thread's shape (llm_bot.events.identity)

    generator = np.random.default_rng(0)
    topics = Topics(generator, dimensions)
    async with await AsyncConnection.connect(url, autocommit=True) as connection:
        await load_turns(
            connection, topics, generator, users * turns_per_user, owner, thread, progress
        )
        # As a table long written to would be: its rows' hint bits set and visible to all (else
        # the events' first reads set them, and with data checksums each such page is written
        # to the WAL whole), and its statistics current.
        await connection.execute("VACUUM (ANALYZE)")


def fill_tool_calls(url: str, calls: int, users: int, prefix: str, progress: Progress) -> None:
    """``calls`` platform-tool calls recorded through the ledger, each started and done."""
    progress(f"tool_calls: {calls} calls through the ledger")
    asyncio.run(_record_calls(url, calls, users, prefix))


async def _record_calls(url: str, calls: int, users: int, prefix: str) -> None:
    settings = load_settings(DATABASE_URL=url)
    async with open_pool(settings, "ledger") as pool:
        ledger = PostgresToolLedger.from_settings(pool, settings)

        async def answer() -> ToolOutcome:
            return ToolOutcome(TOOL_ANSWER, False)

        async def record(start: int) -> None:
            for index in range(start, calls, LEDGER_CONCURRENCY):
                key = CallKey(f"user-{index % users}", f"{prefix}-call-{index}", STEP_KEY, 0)
                await ledger.once(key, TOOL_ID, TOOL_ARGUMENTS, answer)

        await asyncio.gather(*(record(start) for start in range(LEDGER_CONCURRENCY)))
