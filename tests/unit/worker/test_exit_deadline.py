"""A stop bounded by a deadline: past it the process ends, saying what held it; a stop that
ends in time disarms it and the process goes on."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import threading, time, sys
from llm_bot.worker.exit_deadline import exit_after
deadline = exit_after(0.3, "closing")
if sys.argv[1] == "in-time":
    deadline.set()
    time.sleep(0.6)
    print("still running", flush=True)
    sys.exit(3)
threading.Event().wait()  # a close that never returns
"""


def run(case: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, case], capture_output=True, text=True, timeout=60
    )


def test_past_the_deadline_the_process_exits_with_every_threads_stack() -> None:
    done = run("hung")
    assert done.returncode == 0
    assert "closing: not done after 0.3 s, exiting" in done.stderr
    assert "most recent call first" in done.stderr


def test_a_stop_in_time_disarms_the_deadline() -> None:
    done = run("in-time")
    assert (done.returncode, done.stdout.strip()) == (3, "still running")
