"""The memory commit names what it reads before it writes, and the group committer orders by
those names: two turns of one thread, or of one user, never interleave in a batch."""

from __future__ import annotations

import functools
from typing import Any

from psycopg import AsyncConnection

from llm_bot.clock import utc_now
from llm_bot.db.batches import Item, chains
from llm_bot.memory.commit import MemoryCommit, Pair


def turn(thread_id: str, user_id: str) -> Pair:
    return Pair("event-1:0:llm-bot", thread_id, user_id, "hi", "hello", utc_now(), None)


async def work(connection: AsyncConnection[Any]) -> None:
    """Stands for a turn's writes: only the chains it lands in matter here."""


def test_turns_sharing_a_thread_or_a_user_are_chained_in_order_and_the_rest_are_not() -> None:
    turns = [
        turn("cli:lobby", "ada"),
        turn("cli:lobby", "bo"),  # ada's thread
        turn("cli:den", "ada"),  # ada again, elsewhere
        turn("cli:attic", "cy"),
        turn("dora", "eli"),  # a thread and a user of the same name are not one key
        turn("cli:cellar", "dora"),
    ]
    works = [functools.partial(work) for _ in turns]  # one distinct work per turn
    batch = [Item(w, MemoryCommit.lock_keys(t), None) for w, t in zip(works, turns, strict=True)]
    assert sorted(chains(batch), key=len, reverse=True) == [
        works[:3],
        [works[3]],
        [works[4]],
        [works[5]],
    ]
