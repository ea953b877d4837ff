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


def test_raw_lines_are_counted_by_stage_and_shared_out_of_the_cpu() -> None:
    """A thread waiting on a lock is no CPU, whatever py-spy took it for."""
    lines = [
        f"handle ({ROOT}/transport/handler.py:9);decode ({ROOT}/events/codec.py:45) 3\n",
        "run (/usr/lib/python3.11/asyncio/runners.py:118) 1\n",
        "not a sample\n",
        f"run ({ROOT}/transport/handler.py:9);Condition.wait ({THREADING}:320) 5\n",
    ]
    samples = read_samples(lines)
    assert samples == {stages.DECODE: 3, stages.LOOP: 1}
    [decode, loop] = breakdown(samples, cpu_ms_per_event=8.0)
    assert (decode.stage, decode.share, decode.cpu_ms) == (stages.DECODE, 0.75, 6.0)
    assert (loop.stage, loop.cpu_ms) == (stages.LOOP, 2.0)
    assert breakdown(read_samples([]), 8.0) == []
