"""Facts that change: the model corrects "vegetarian" to "vegan" by the memory's key; only the
current fact reaches the model afterwards, the earlier one is kept with when it was true, and
forgetting the memory takes its history with it."""

from __future__ import annotations

import asyncio
import json

import pytest

from llm_bot.cli import main
from llm_bot.events.inbound import inbound_of
from llm_bot.llm.client import ModelClient
from llm_bot.memory.store import MemoryStore
from llm_bot_tools.local.openai_server import LocalModelServer

from ...support.answering import answer_event
from .graph_run import GRAPH, answerer_for, commit, context_for, first_request, said

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_servers")]
QUESTION = "what should the user order tonight?"


async def test_a_correction_by_key_keeps_the_old_fact_as_history_and_shows_only_the_new(
    memory_store: MemoryStore, model: ModelClient, chat_server: LocalModelServer
) -> None:
    context = context_for(memory_store, model)
    nia = memory_store.for_user("nia")
    key, _ = await nia.put("User is vegetarian")
    before = await nia.get(key)
    assert before is not None

    chat_server.script_tool_call("upsertMemory", {"key": key, "content": "User is vegan"})
    correction = said("nia", "thread-a", "actually I went vegan last month")
    answerer = answerer_for(memory_store, model)
    await commit(answerer, await answerer.answer(inbound_of(correction)))

    chat_server.reset()
    await answer_event(GRAPH, context, said("nia", "thread-b", QUESTION))
    shown = first_request(chat_server)
    assert f'- [{key}] "User is vegan"' in shown
    assert "User is vegetarian" not in shown

    (earlier,) = await nia.history(key)
    assert (earlier.version, earlier.content) == (1, "User is vegetarian")
    assert earlier.valid_from.isoformat() == before.updated_at
    assert earlier.valid_to >= earlier.valid_from

    # The same text said again is no new version; a second correction is version 2.
    await nia.put("User is vegan", key=key)
    await nia.put("User eats fish again", key=key)
    assert [v.content for v in await nia.history(key)] == ["User is vegetarian", "User is vegan"]


async def test_memories_get_history_shows_the_versions_and_delete_forgets_them(
    memory_store: MemoryStore,
    migrated_database_url: str,
    embedding_server: LocalModelServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nia = memory_store.for_user("nia")
    key, _ = await nia.put("User is vegetarian")
    await nia.put("User is vegan", key=key)
    monkeypatch.setenv("DATABASE_URL", migrated_database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_ENDPOINT", embedding_server.base_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "local-embeddings")
    argv = ["memories", "get", key, "--user", "nia", "--history", "--json"]

    def cli(*args: str) -> dict[str, object]:
        assert main(list(args)) == 0
        result: dict[str, object] = json.loads(capsys.readouterr().out)
        return result

    shown = await asyncio.to_thread(cli, *argv)
    assert shown["content"] == "User is vegan"
    assert [v["content"] for v in shown["history"]] == ["User is vegetarian"]  # type: ignore[attr-defined,index]
    await asyncio.to_thread(cli, "memories", "delete", key, "--user", "nia", "--json")
    assert await nia.history(key) == []
