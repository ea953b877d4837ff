"""``llm-bot maintain``'s backfill of recall's index: the older turns of users who became deep.

The writer marks a pair ``indexed`` when recall found its user deep (:mod:`llm_bot.memory.recall`,
:mod:`llm_bot.db.turn_index`), so the turns a user wrote before that are not in the index: their
recall scans them exactly beside it, correct but at the cost the index is there to avoid. This
job marks them, off the event's path: every user past the depth from which recall reads the
index (with the smallest pool a recall asks for, so no user recall calls deep is left out), in
batches of ``batch`` turns, each its own short transaction (its rows enter the HNSW index as it
commits, ~3 ms a turn). Rows locked by another run are skipped and taken by the next batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection

from llm_bot.memory.recall import MIN_POOL
from llm_bot.memory.turns.upkeep import deep_users_unmarked, mark_indexed

PROGRESS_EVERY_S = 2.0
Progress = Callable[[str], None]


async def index_deep_users(
    connection: AsyncConnection[Any],
    batch: int,
    progress: Progress,
    *,
    deep_from: int | None = None,
) -> int:
    """Mark the unmarked turns of every deep user on an autocommit ``connection``; how many.
    ``deep_from`` replaces the depth computed from the table's size (a test's few turns)."""
    users = await deep_users_unmarked(connection, MIN_POOL, deep_from)
    marked = 0
    reported = time.monotonic()
    for number, user in enumerate(users, 1):
        while marked_now := await mark_indexed(connection, user, batch):
            marked += marked_now
            if time.monotonic() - reported >= PROGRESS_EVERY_S:
                reported = time.monotonic()
                progress(f"indexing deep users' turns: {marked} marked, user {number}/{len(users)}")
    if users:
        progress(f"indexed {marked} turn(s) of {len(users)} deep user(s)")
    return marked
