"""Two events of one user write one memory at the same time. Two workers' commits: each goes
wholly before or after the other, so neither event is lost to the other's version of the
memory, and a memory forgotten by one keeps none of its text when the other writes it again.
One fact sent twice at once: one memory, not two. An event that finished first but commits
last (its embedding slower): its text follows the other's, and no period goes back in time.

The overlap is made, not hoped for: the test holds the memory's row locked while both workers'
commits reach it, and lets go once the database shows both waiting; or the local model server
holds the first event's answer, after its tool ran, while the second event runs and commits."""

from __future__ import annotations

import asyncio
import json
import time
from uuid import uuid4

import psycopg
import pytest

from llm_bot.events.models import InternalEventV2
from llm_bot.memory.wiring import open_memory_store
from llm_bot_tools.local.openai_server import EMBEDDINGS_PATH, LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus
from .conftest import BusFactory

pytestmark = pytest.mark.integration

HOLD_S = 4.0


def cue(name: str, arguments: dict[str, str]) -> str:
    return f"[[tool:{name} {json.dumps(arguments)}]]"


async def waiting_on_locks(url: str, count: int) -> None:
    """Until ``count`` statements of the test's database wait on a lock (on Citus, on the
    node that holds the user's shard: ``citus_stat_activity`` shows every node's)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as db:
        (citus,) = db.execute(
            "SELECT to_regclass('citus_stat_activity') IS NOT NULL"
        ).fetchone() or (False,)
        activity = "citus_stat_activity" if citus else "pg_stat_activity"
        while True:
            (waiting,) = db.execute(
                f"SELECT count(*) FROM {activity}"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone() or (0,)
            if waiting >= count:
                return
            assert time.monotonic() < deadline, f"{waiting} of {count} commits wait on a lock"
            await asyncio.sleep(0.05)


async def commit_together(
    url: str,
    user: str,
    key: str,
    first: tuple[MemoryBus, InternalEventV2],
    second: tuple[MemoryBus, InternalEventV2],
) -> None:
    """``first`` and then ``second``, each on a worker of its own, both committing while the
    memory's row is held; both answered, neither dead-lettered."""
    buses = [first[0], second[0]]
    answers = [bus.tap(bus.egress_topic) for bus in buses]
    dead = [bus.deadletter_tap() for bus in buses]
    with psycopg.connect(url) as holder:
        holder.execute(
            "SELECT FROM memories WHERE user_id = %s AND key = %s FOR UPDATE", (user, key)
        )
        async with buses[0].serving(buses[0].settings()), buses[1].serving(buses[1].settings()):
            for waiting, (bus, event) in enumerate((first, second), start=1):
                bus.publish_event(event)
                await waiting_on_locks(url, waiting)
            holder.rollback()
            for taken, (_, event) in zip(answers, (first, second), strict=True):
                [answer] = await taken.take(1, timeout_s=30)
                assert json.loads(answer.data)["correlationId"] == event.correlation_id
    assert [await tap.drain() for tap in dead] == [[], []]


def rows(url: str, sql: str, user: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as db:
        return db.execute(sql, (user,)).fetchall()


async def two_workers_with_a_memory(
    make_bus: BusFactory, url: str
) -> tuple[MemoryBus, MemoryBus, str, str]:
    one, two = make_bus(url, {}), make_bus(url, {})
    user = f"mc-{uuid4().hex[:8]}"
    async with open_memory_store(one.settings()) as store:
        key, _ = await store.for_user(user).put("likes tea")
    return one, two, user, key


async def test_two_updates_of_one_memory_at_once_both_commit_as_consecutive_versions(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    url = migrated_database_url
    one, two, user, key = await two_workers_with_a_memory(make_bus, url)
    to_coffee = cue("upsertMemory", {"key": key, "content": "likes coffee"})
    to_juice = cue("upsertMemory", {"key": key, "content": "likes juice"})
    await commit_together(
        url,
        user,
        key,
        (one, prompt_event(to_coffee, user=user, thread="room-1", egress_topic=one.egress_topic)),
        (two, prompt_event(to_juice, user=user, thread="room-2", egress_topic=two.egress_topic)),
    )

    assert rows(url, "SELECT content FROM memories WHERE user_id = %s", user) == [("likes juice",)]
    versions = rows(
        url,
        "SELECT version, content, valid_from, valid_to FROM memory_versions"
        " WHERE user_id = %s ORDER BY version",
        user,
    )
    assert [(number, text) for number, text, _, _ in versions] == [
        (1, "likes tea"),
        (2, "likes coffee"),
    ]
    assert versions[0][3] == versions[1][2]  # one period ends where the next begins


async def test_a_memory_forgotten_while_another_event_rewrites_it_keeps_no_forgotten_text(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    url = migrated_database_url
    one, two, user, key = await two_workers_with_a_memory(make_bus, url)
    forget = cue("deleteMemory", {"key": key})
    to_coffee = cue("upsertMemory", {"key": key, "content": "likes coffee"})
    await commit_together(
        url,
        user,
        key,
        (one, prompt_event(forget, user=user, thread="room-1", egress_topic=one.egress_topic)),
        (two, prompt_event(to_coffee, user=user, thread="room-2", egress_topic=two.egress_topic)),
    )

    assert rows(url, "SELECT content FROM memories WHERE user_id = %s", user) == [("likes coffee",)]
    assert rows(url, "SELECT content FROM memory_versions WHERE user_id = %s", user) == []


async def generation_calls(model_server: LocalModelServer, count: int) -> None:
    """Until the server has received ``count`` model calls."""
    deadline = time.monotonic() + 30
    while len(model_server.chat_requests()) < count:
        assert time.monotonic() < deadline, "the first event never reached its second call"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("second_in_dm", [False, True])
async def test_one_fact_saved_by_two_events_at_once_is_one_memory_of_its_scope(
    make_bus: BusFactory,
    migrated_database_url: str,
    model_server: LocalModelServer,
    second_in_dm: bool,
) -> None:
    url = migrated_database_url
    bus = make_bus(url, {})
    user = f"mc-{uuid4().hex[:8]}"
    save = cue("upsertMemory", {"content": "is allergic to peanuts"})
    first = prompt_event(save, user=user, thread="room-1", egress_topic=bus.egress_topic)
    second = prompt_event(save, user=user, thread="room-2", egress_topic=bus.egress_topic)
    if second_in_dm:
        second.egress.type = "dm"
    egress = bus.tap(bus.egress_topic)
    model_server.hang_next(1, 0.0)  # the first event's tool call comes at once
    model_server.hang_next(1, HOLD_S)  # its answer, after its tool saved the fact, waits
    async with bus.serving(bus.settings()):
        bus.publish_event(first)
        await generation_calls(model_server, 2)
        bus.publish_event(second)
        [answer] = await egress.take(1, timeout_s=60)
        assert json.loads(answer.data)["correlationId"] == second.correlation_id
        await egress.take(1, timeout_s=60)

    stored = rows(
        url, "SELECT content, visibility FROM memories WHERE user_id = %s ORDER BY 2", user
    )
    if second_in_dm:  # a fact told in a DM is never merged with one told in public
        assert stored == [("is allergic to peanuts", "dm"), ("is allergic to peanuts", "public")]
    else:
        assert stored == [("is allergic to peanuts", "public")]


async def embedding_calls(model_server: LocalModelServer, count: int) -> None:
    """Until the server has received ``count`` embedding calls."""
    deadline = time.monotonic() + 30
    while sum(request.path == EMBEDDINGS_PATH for request in model_server.requests) < count:
        assert time.monotonic() < deadline, f"fewer than {count} embedding calls came"
        await asyncio.sleep(0.05)


async def test_an_update_committed_after_a_later_one_keeps_the_periods_in_order(
    make_bus: BusFactory, migrated_database_url: str, model_server: LocalModelServer
) -> None:
    url = migrated_database_url
    bus = make_bus(url, {})
    user = f"mc-{uuid4().hex[:8]}"
    async with open_memory_store(bus.settings()) as store:
        key, _ = await store.for_user(user).put("likes tea")
    model_server.clear()
    to_coffee = cue("upsertMemory", {"key": key, "content": "likes coffee"})
    to_juice = cue("upsertMemory", {"key": key, "content": "likes juice"})
    first = prompt_event(to_coffee, user=user, thread="room-1", egress_topic=bus.egress_topic)
    second = prompt_event(to_juice, user=user, thread="room-2", egress_topic=bus.egress_topic)
    egress = bus.tap(bus.egress_topic)
    # The first event's question and tool round embed at once; the embedding of its writes,
    # made after its run ended, waits while the second event runs and commits.
    model_server.hang_next(2, 0.0, "embeddings")
    model_server.hang_next(1, HOLD_S, "embeddings")
    async with bus.serving(bus.settings()):
        bus.publish_event(first)
        await embedding_calls(model_server, 3)
        bus.publish_event(second)
        [answer] = await egress.take(1, timeout_s=60)
        assert json.loads(answer.data)["correlationId"] == second.correlation_id
        await egress.take(1, timeout_s=60)

    [(current, updated_at)] = rows(
        url, "SELECT content, updated_at FROM memories WHERE user_id = %s", user
    )
    assert current == "likes coffee"  # committed last
    versions = rows(
        url,
        "SELECT content, valid_from, valid_to FROM memory_versions"
        " WHERE user_id = %s ORDER BY version",
        user,
    )
    assert [text for text, _, _ in versions] == ["likes tea", "likes juice"]
    times = [moment for _, valid_from, valid_to in versions for moment in (valid_from, valid_to)]
    assert times == sorted(times), versions
    assert [valid_to for _, _, valid_to in versions[:-1]] == [
        valid_from for _, valid_from, _ in versions[1:]
    ]
    assert versions[-1][2] == updated_at  # the current text begins where the last one ended
