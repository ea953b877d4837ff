"""The schemas measurements load their data into (``llm_bot_tools.local.scratch_schemas``): each
run's own, out of sight of any other table, dropped however the run ends."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from llm_bot.db.migrate import available_migrations, migrate
from llm_bot_tools.local.scratch_schemas import LOCK_SPACE, MARKER, scratch_schema

pytestmark = pytest.mark.integration


def scratch_schemas(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT nspname FROM pg_namespace WHERE obj_description(oid, 'pg_namespace') = %s"
            " ORDER BY nspname",
            (MARKER,),
        ).fetchall()
    return [name for (name,) in rows]


async def test_runs_at_once_each_have_a_schema_of_their_own_and_leave_none(
    fresh_database_url: str,
) -> None:
    both_written = asyncio.Barrier(2)

    async def run(viewer: str) -> list[tuple[str, str]]:
        """The viewers the run reads back, each with the schema it is read in."""
        async with scratch_schema(fresh_database_url, "test_together") as url:
            await asyncio.to_thread(migrate, url)
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
                await connection.execute(
                    "INSERT INTO console_views VALUES ('kim', now(), %s, 'memories')", (viewer,)
                )
                await both_written.wait()
                read = await connection.execute(
                    "SELECT viewer, current_schema() FROM console_views"
                )
                return await read.fetchall()

    [(first, in_first)], [(second, in_second)] = await asyncio.gather(run("a"), run("b"))
    assert (first, second) == ("a", "b")
    assert in_first != in_second
    assert scratch_schemas(fresh_database_url) == []


async def test_tables_beside_the_vector_extension_are_out_of_sight(
    fresh_database_url: str,
) -> None:
    """A ledger of migrations in ``public`` (where the extension is) once made the scratch's
    migrations find nothing to do, and every later statement read ``public``'s tables."""
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        connection.execute("CREATE TABLE schema_migrations (version integer PRIMARY KEY)")
    async with scratch_schema(fresh_database_url, "test_apart") as url:
        assert len(await asyncio.to_thread(migrate, url)) == len(available_migrations())
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT to_regclass('public.schema_migrations')").fetchone()
        assert row == (None,)
        assert scratch_schemas(fresh_database_url) == []


@pytest.mark.parametrize("failure", [RuntimeError("the measurement failed"), KeyboardInterrupt()])
async def test_a_run_that_raises_drops_its_schema(
    fresh_database_url: str, failure: BaseException
) -> None:
    async def run() -> None:
        async with scratch_schema(fresh_database_url, "test_raises") as url:
            await asyncio.to_thread(migrate, url)
            assert len(scratch_schemas(fresh_database_url)) == 1
            raise failure

    with pytest.raises(type(failure)):
        await run()
    assert scratch_schemas(fresh_database_url) == []


async def test_a_cancelled_run_drops_its_schema(fresh_database_url: str) -> None:
    """Ctrl-C under ``asyncio.run`` cancels the main task."""
    entered = asyncio.Event()

    async def run() -> None:
        async with scratch_schema(fresh_database_url, "test_cancelled"):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(run())
    await entered.wait()
    assert len(scratch_schemas(fresh_database_url)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert scratch_schemas(fresh_database_url) == []


async def test_the_next_run_drops_the_schema_of_a_dead_run_and_spares_a_live_ones(
    fresh_database_url: str,
) -> None:
    """A run killed with -9 never drops its schema; its connection ends with it (ended here by
    the server), and that frees the schema's lock."""
    async with scratch_schema(fresh_database_url, "test_alive"):
        dead = scratch_schema(fresh_database_url, "test_dead")
        await dead.__aenter__()
        (killed,) = [s for s in scratch_schemas(fresh_database_url) if s.startswith("test_dead")]
        with psycopg.connect(fresh_database_url, autocommit=True) as connection:
            ended = connection.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks"
                " WHERE locktype = 'advisory' AND classid = %s::oid"
                " AND objid = %s::regnamespace::oid AND objsubid = 2",
                (LOCK_SPACE, killed),
            ).fetchall()
        assert ended == [(True,)]
        async with scratch_schema(fresh_database_url, "test_next"):
            left = scratch_schemas(fresh_database_url)
        assert [name.split("_")[1] for name in left] == ["alive", "next"]
        with pytest.raises(psycopg.OperationalError):
            await dead.__aexit__(None, None, None)
    assert scratch_schemas(fresh_database_url) == []
