"""A hung async test fails at its deadline with what it waited on, and the run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_hung_async_test_fails_saying_where_and_the_next_one_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = session\n"
        "asyncio_default_test_loop_scope = session\ntimeout = 2\n"
    )
    pytester.makeconftest('pytest_plugins = ["tests.support.hang_watch"]\n')
    pytester.makepyfile(
        """
        import asyncio

        async def test_waits_on_what_never_comes():
            await asyncio.Event().wait()

        async def test_after_it():
            await asyncio.sleep(0)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_waits_on_what_never_comes hangs: the threads*",
            "*the tasks on its loop*",
            "*coro=<test_waits_on_what_never_comes() running at*",
        ]
    )
