"""A test that hangs fails, says where, and lets the run go on.

pytest-timeout (``timeout`` in pyproject.toml) gives every test a deadline; its own thread
method would print the threads' stacks and end the whole run, and its signal method raises in
whatever the main thread runs. Neither says what an async test waits on: its stack is a
coroutine suspended on the event loop (the tests share one loop a session), which no thread's
stack shows. So at the deadline this prints every thread's stack and every task's on the
loop, then cancels the test's own task: the test fails with what it waited on, and the tests
after it run. Only a test that does not end within :data:`CANCEL_GRACE_S` of its cancel (a
thread blocked outside the loop) falls back to pytest-timeout's ending of the run.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import io
import sys
import threading
from types import FrameType
from typing import Any

import pytest
import pytest_timeout

CANCEL_GRACE_S = 30.0


def _loop_of(item: pytest.Item) -> asyncio.AbstractEventLoop | None:
    """The running loop the test's coroutine is on, found through the tasks of the loops the
    test's fixtures hold (the session's), or None for a test that is not async."""
    for loop in _running_loops():
        if _tasks_of(item, loop):
            return loop
    return None


def _running_loops() -> list[asyncio.AbstractEventLoop]:
    return [
        found
        for found in gc.get_objects()
        if isinstance(found, asyncio.AbstractEventLoop) and found.is_running()
    ]


def _is_the_tests(frame: FrameType, item: pytest.Item) -> bool:
    return frame.f_code.co_name == getattr(item, "originalname", item.name) and (
        frame.f_code.co_filename == str(item.path)
    )


def _tasks_of(item: pytest.Item, loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    return [
        task
        for task in asyncio.all_tasks(loop)
        if any(_is_the_tests(frame, item) for frame in task.get_stack(limit=1))
    ]


def _report(item: pytest.Item, loop: asyncio.AbstractEventLoop | None) -> None:
    out = sys.__stderr__
    if out is None:
        return
    out.write(f"\n{'+' * 30} {item.nodeid} hangs: the threads {'+' * 30}\n")
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)
    if loop is not None:
        out.write(f"{'+' * 30} the tasks on its loop {'+' * 30}\n")
        for task in list(asyncio.all_tasks(loop)):
            text = io.StringIO()
            task.print_stack(file=text)
            out.write(text.getvalue())
    out.flush()


class _Watch:
    """One test's deadline: report and cancel, then end the run if the cancel did not."""

    def __init__(self, item: pytest.Item, settings: Any) -> None:
        self._item, self._settings = item, settings
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._ended.wait(self._settings.timeout):
            return
        loop = _loop_of(self._item)
        _report(self._item, loop)
        if loop is not None:
            for task in _tasks_of(self._item, loop):
                loop.call_soon_threadsafe(task.cancel)
            if self._ended.wait(CANCEL_GRACE_S):
                return
        pytest_timeout.timeout_timer(self._item, self._settings)

    def cancel(self) -> None:
        self._ended.set()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool:
    watch = _Watch(item, settings)
    item.cancel_timeout = watch.cancel  # type: ignore[attr-defined]
    return True
