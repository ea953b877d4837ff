"""A profile's sample goes to the stage of its innermost frame that names one: telemetry
wherever logging is, else llm-bot's innermost staged frame, else the innermost library."""

from __future__ import annotations

import pytest

from llm_bot_tools.bench import stages
from llm_bot_tools.bench.stages import breakdown, read_samples, stage_of

SITE = "/venv/lib/python3.11/site-packages"
ROOT = "/repo/llm_bot"
HANDLE = ("EventHandler.handle", f"{ROOT}/transport/handler.py")
RUN = ("Runner.run", "/usr/lib/python3.11/asyncio/runners.py")
VALIDATE = ("validate", f"{SITE}/pydantic/main.py")
EXECUTE = ("execute", f"{SITE}/psycopg/cursor_async.py")
LOG = ("debug", "/usr/lib/python3.11/logging/__init__.py")
THREADING = "/usr/lib/python3.11/threading.py"


@pytest.mark.parametrize(
    ("frames", "stage"),
    [
        (
            [
                HANDLE,
                ("received", f"{ROOT}/events/inbound.py"),
                ("validate", f"{SITE}/pydantic/main.py"),
            ],
            stages.DECODE,
        ),
        (
            [
                HANDLE,
                ("candidates", f"{ROOT}/memory/turns/recall.py"),
                ("execute", f"{SITE}/psycopg/cursor_async.py"),
            ],
            stages.MEMORY,
        ),
        (
            [
                HANDLE,
                ("make_offer", f"{ROOT}/graph/offering.py"),
                ("debug", "/usr/lib/python3.11/logging/__init__.py"),
            ],
            stages.TELEMETRY,
        ),
        ([HANDLE, ("encode", f"{ROOT}/events/codec.py")], stages.PUBLISH),
        ([HANDLE, ("decode", f"{ROOT}/events/codec.py")], stages.DECODE),
        ([HANDLE, ("store_output", f"{ROOT}/db/processed_events/__init__.py")], stages.COMMIT),
        ([HANDLE, ("try_claim", f"{ROOT}/db/processed_events/__init__.py")], stages.CLAIM),
        (
            [HANDLE, ("EventHandler._forward.<locals>.work", f"{ROOT}/transport/handler.py")],
            stages.LOOP,
        ),
        ([RUN, ("Pregel.astream", f"{SITE}/langgraph/pregel/main.py")], stages.GRAPH),
        ([RUN, ("wait_async", f"{SITE}/psycopg/waiting.py")], stages.DRIVER),
        ([RUN], stages.LOOP),
        ([], stages.LOOP),
    ],
)
def test_a_sample_goes_to_its_innermost_staged_frame(
    frames: list[tuple[str, str]], stage: str
) -> None:
    assert stage_of(frames) == stage


def test_the_loop_threads_samples_share_out_its_cpu_and_other_threads_are_one_row() -> None:
    """A thread waiting on a lock is no CPU, whatever py-spy took it for; the other threads'
    samples are not read (their CPU comes from the kernel)."""
    lines = [
        f"thread (7): MainThread;handle ({ROOT}/transport/handler.py:9);"
        f"decode ({ROOT}/events/codec.py:45) 3\n",
        "thread (7): MainThread;run (/usr/lib/python3.11/asyncio/runners.py:118) 1\n",
        f"thread (7): MainThread;start ({THREADING}:9);Condition.wait ({THREADING}:320) 5\n",
        f"thread (9): Thread-2;channel_spin ({SITE}/grpc/_channel.py:2) 50\n",
        "not a sample\n",
    ]
    samples = read_samples(lines, thread=7)
    assert samples == {stages.DECODE: 3, stages.LOOP: 1}
    assert read_samples(lines)[stages.PUBSUB] == 50  # every thread, without one named
    [decode, threads, loop] = breakdown(samples, loop_ms=8.0, threads_ms=4.0)
    assert (decode.stage, decode.cpu_ms, decode.share) == (stages.DECODE, 6.0, 0.5)
    assert (threads.stage, threads.cpu_ms) == (stages.THREADS, 4.0)
    assert (loop.stage, loop.cpu_ms) == (stages.LOOP, 2.0)
    assert breakdown(read_samples([]), 8.0, 4.0) == []
