"""Where a benchmarked worker's CPU goes, by stage of an event: a py-spy profile of the worker
(``llm-bot bench run --profile DIR``) read back and each sample given to one stage.

Only the event loop's thread is sampled into stages: it runs every stage of every event. The
other threads (the Pub/Sub client's streams, leases and publishing, gRPC's polling, thread
pools) spend most of their life blocked in C, which py-spy cannot tell from running, so their
part is taken from the kernel instead: the process's CPU less the loop thread's, both read from
``/proc`` over the same span, is one row, "other threads".

A sample is a stack of frames, outermost first. It belongs to the stage of its innermost frame
that names one: a frame of logging, OpenTelemetry or the Prometheus client makes it telemetry
(whoever logged); else the innermost frame of llm-bot's own code whose module or function is
in :data:`STAGES` (recall's statement, run by psycopg, is memory retrieval); a sample with none
of those belongs to the library at its innermost frame (the event loop, LangGraph's runtime,
psycopg waiting on a socket, the Pub/Sub client's threads). py-spy samples only threads on the
CPU (not ``--idle``), but it takes a thread blocked on a lock or a queue (the Pub/Sub client's
and the thread pool's, waiting in C with the GIL released) for a running one: a sample whose
innermost frame is such a wait (:data:`WAITS`) is left out. What is left, a stage's share of
it is its share of the worker's CPU.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from llm_bot_tools.bench.procfs import cpu_seconds

DECODE = "decode and validation"
CLAIM = "claim"
BEHAVIOUR = "behaviour"
MEMORY = "memory retrieval and budget"
PROMPT = "prompt composition"
MODEL = "model client"
EXPLANATION = "explanation record"
COMMIT = "commit"
PUBLISH = "encode and publish"
TELEMETRY = "telemetry and logging"
GRAPH = "graph runtime (LangGraph)"
DRIVER = "database driver (psycopg)"
PUBSUB = "Pub/Sub client"
HTTP = "HTTP client (openai, aiohttp)"
LOOP = "event loop and other"
THREADS = "other threads (Pub/Sub client, gRPC, pools)"

# llm-bot's code by stage: a module (path under llm_bot/, a folder ending in "/") and,
# where one module serves two stages, the function (``module:function``). The first match of
# the innermost llm-bot frame decides, so functions come before their module.
STAGES: tuple[tuple[str, str], ...] = (
    ("events/codec.py:encode", PUBLISH),
    ("events/codec.py:to_document", PUBLISH),
    ("events/codec.py", DECODE),
    ("events/inbound.py", DECODE),
    ("events/limits.py", DECODE),
    ("events/models.py", DECODE),
    ("events/identity.py", DECODE),
    ("events/routing.py", PUBLISH),
    ("db/processed_events/__init__.py:store_output", COMMIT),
    ("db/processed_events/", CLAIM),
    ("transport/ledgered.py", CLAIM),
    ("db/leases.py", CLAIM),
    ("db/gathered_marks.py", CLAIM),
    ("graph/behavior/", BEHAVIOUR),
    ("graph/offering.py", BEHAVIOUR),
    ("graph/nodes/ingest_prompt.py", BEHAVIOUR),
    ("memory/commit.py", COMMIT),
    ("memory/run_writes.py", COMMIT),
    ("memory/turns/window.py:write_pair", COMMIT),
    ("memory/rendering.py", PROMPT),
    ("memory/", MEMORY),
    ("db/hybrid.py", MEMORY),
    ("db/queries.py", MEMORY),
    ("llm/embeddings.py", MEMORY),
    ("llm/embedding_batch.py", MEMORY),
    ("graph/nodes/retrieve_memories.py", MEMORY),
    ("llm/client.py", MODEL),
    ("llm/http.py", MODEL),
    ("transport/progress.py:complete", MODEL),
    ("llm/openai_format.py", PROMPT),
    ("llm/messages.py", PROMPT),
    ("graph/prompt/", PROMPT),
    ("graph/nodes/call_model.py", PROMPT),
    ("explanation/", EXPLANATION),
    ("db/group_commit.py", COMMIT),
    ("answer/unit.py:prepare", COMMIT),
    ("answer/unit.py:apply", COMMIT),
    ("transport/publisher.py", PUBLISH),
    ("transport/handler.py:output_of", PUBLISH),
    ("transport/handler.py:_publish", PUBLISH),
    ("telemetry/", TELEMETRY),
)
# Libraries whose frames make a sample telemetry wherever they are.
_TELEMETRY_LIBRARIES = ("logging/", "opentelemetry/", "prometheus_client/")
# A sample with no stage of llm-bot's: the library of its innermost frame.
_LIBRARIES = (
    ("langgraph/", GRAPH),
    ("langchain_core/", GRAPH),
    ("psycopg/", DRIVER),
    ("psycopg_pool/", DRIVER),
    ("psycopg_binary/", DRIVER),
    ("google/", PUBSUB),
    ("grpc/", PUBSUB),
    ("proto/", PUBSUB),
    ("openai/", HTTP),
    ("aiohttp/", HTTP),
    ("httpx", HTTP),
    ("yarl/", HTTP),
    ("multidict/", HTTP),
)
# py-spy, installed beside this Python (a dependency of the tools).
PY_SPY = Path(sys.executable).parent / "py-spy"
# Innermost frames of a thread that waits (function, end of its path): not CPU.
WAITS = (
    ("Condition.wait", "/threading.py"),
    ("Event.wait", "/threading.py"),
    ("Queue.get", "/queue.py"),
    ("_worker", "/concurrent/futures/thread.py"),
)
# py-spy's raw format: a frame is "function (path:line)" (frame_of); with --threads the first is the
# thread's: "thread (ID): name".
_THREAD = re.compile(r"^thread \((?P<id>\d+)\)")


@dataclass(frozen=True)
class StageCpu:
    stage: str
    share: float  # of the worker's samples
    cpu_ms: float  # per event: the share of the worker's CPU per event

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def stage_of(frames: list[tuple[str, str]]) -> str:
    """The stage of one sample, ``frames`` as (function, path), outermost first."""
    for function, path in reversed(frames):
        if any(library in path for library in _TELEMETRY_LIBRARIES):
            return TELEMETRY
        _, found, module = path.rpartition("llm_bot/")
        if not found:
            continue
        # A nested function's frame is named like "outer.<locals>.inner": its last part.
        name = function.rsplit(".", 1)[-1]
        for where, stage in STAGES:
            target, _, wanted = where.partition(":")
            if module.startswith(target) and (not wanted or wanted == name):
                return stage
    innermost = frames[-1][1] if frames else ""
    return next((stage for library, stage in _LIBRARIES if library in innermost), LOOP)


def read_samples(lines: Iterable[str], thread: int | None = None) -> Counter[str]:
    """Samples by stage, from py-spy's raw format (a stack of frames joined by ";", then a
    count; with ``--threads`` the first is ``thread (ID): name``), of ``thread`` alone when
    given, less those of a thread that waits."""
    stages: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        if thread is not None and _thread_of(stack) != thread:
            continue
        frames = [frame for frame in map(frame_of, stack.split(";")) if frame is not None]
        if frames and any(
            frames[-1][0] == function and frames[-1][1].endswith(path) for function, path in WAITS
        ):
            continue
        stages[stage_of(frames)] += int(count)
    return stages


def frame_of(text: str) -> tuple[str, str] | None:
    """(function, path) of one frame, ``function (path:line)``; None for a thread's name."""
    function, opened, rest = text.rpartition(" (")
    path, colon, line = rest.removesuffix(")").rpartition(":")
    if not opened or not rest.endswith(")") or not colon or not line.isdigit():
        return None
    return function, path


def _thread_of(stack: str) -> int | None:
    found = _THREAD.match(stack)
    return int(found["id"]) if found else None


def breakdown(samples: Counter[str], loop_ms: float, threads_ms: float) -> list[StageCpu]:
    """The loop thread's CPU per event (``loop_ms``) shared out by its samples' stages, and the
    other threads' (``threads_ms``) as one row; each row's share of the whole, largest first."""
    sampled = sum(samples.values())
    total = loop_ms + threads_ms
    if sampled == 0 or total <= 0:
        return []
    rows = [(stage, loop_ms * count / sampled) for stage, count in samples.items()]
    rows.append((THREADS, threads_ms))
    return [StageCpu(stage, ms / total, ms) for stage, ms in sorted(rows, key=lambda row: -row[1])]


@dataclass
class Profile:
    """What :func:`profiled` gathered of the workers ``pids``: py-spy's file of each, and the
    CPU seconds of their loop threads and of the whole processes over the span."""

    paths: list[Path]
    pids: list[int]
    loop_s: float = 0.0
    process_s: float = 0.0

    def breakdown(self, events: int) -> list[StageCpu]:
        """The CPU per event of ``events`` handled in the span, by stage."""
        samples: Counter[str] = Counter()
        for path, pid in zip(self.paths, self.pids, strict=True):
            with path.open() as profile:
                samples += read_samples(profile, thread=pid)
        per_event = 1000 / max(1, events)
        threads_s = self.process_s - self.loop_s
        return breakdown(samples, self.loop_s * per_event, threads_s * per_event)


@contextmanager
def profiled(pids: list[int], folder: Path, name: str) -> Iterator[Profile]:
    """py-spy records each of ``pids`` (rate 100, each thread apart) until the block ends, and
    the kernel counts their loop threads' CPU and their whole; the :class:`Profile` is complete
    once the block has ended."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}-{pid}.txt" for pid in pids]
    profile = Profile(paths, list(pids))
    options = ["--rate", "100", "--threads", "--full-filenames", "--format", "raw"]
    recorders = [
        subprocess.Popen(
            [str(PY_SPY), "record", "--pid", str(pid), *options, "--output", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for pid, path in zip(pids, paths, strict=True)
    ]
    loop = [cpu_seconds(pid, thread=pid) for pid in pids]
    process = [cpu_seconds(pid) for pid in pids]
    try:
        yield profile
    finally:
        profile.loop_s = sum(cpu_seconds(pid, thread=pid) for pid in pids) - sum(loop)
        profile.process_s = sum(cpu_seconds(pid) for pid in pids) - sum(process)
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)  # py-spy writes what it has
        for recorder in recorders:
            _, errors = recorder.communicate(timeout=60)
            if recorder.returncode not in (0, -2, 130):
                raise RuntimeError(f"py-spy failed ({recorder.returncode}): {errors.decode()}")
