"""A user's page lists the newest ``LIST_LIMIT`` rows of each kind, and says when the user has
more: a list cut there must not read as all the service holds. The app is called in-process,
as the inputs test calls it, on a fresh database."""

from __future__ import annotations

import pytest

from llm_bot.clock import utc_now
from llm_bot.console.app import console_app
from llm_bot.console.reads import LIST_LIMIT
from llm_bot.memory.store import MemoryStore, put_memory

from .test_console_inputs import get, token_console

pytestmark = pytest.mark.integration


async def test_a_list_cut_at_the_limit_says_the_user_has_more(
    memory_store: MemoryStore, migrated_database_url: str
) -> None:
    console = token_console(memory_store, migrated_database_url)
    app = console_app(console)
    async with memory_store.connection() as connection:
        for user, count in (("many", LIST_LIMIT + 1), ("enough", LIST_LIMIT)):
            for n in range(count):
                await put_memory(
                    connection, user, f"k{n:04}", f"fact {n}", {}, "dm", None, utc_now()
                )

    status, page = await get(app, "/user", b"id=many")
    assert status == 200, page
    assert page.count('<tr class="memory">') == LIST_LIMIT
    assert f"Memories (the newest {LIST_LIMIT}; the user has more)" in page

    status, page = await get(app, "/user", b"id=enough")
    assert status == 200, page
    assert page.count('<tr class="memory">') == LIST_LIMIT
    assert f"Memories ({LIST_LIMIT})" in page
