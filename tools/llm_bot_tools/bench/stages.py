"""Where a benchmarked worker's CPU goes, by stage of an event: a py-spy profile of the worker
(``llm-bot bench run --profile DIR``) read back and each sample given to one stage.

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
# A frame of py-spy's raw format: "function (path:line)".
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*):\d+\)$")


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


def read_samples(lines: Iterable[str]) -> Counter[str]:
    """Samples by stage, from py-spy's raw format (a stack of frames joined by ";", then a
    count), less those of a thread that waits."""
    stages: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [
            (match["function"], match["path"])
            for match in map(_FRAME.match, stack.split(";"))
            if match is not None
        ]
        if frames and any(
            frames[-1][0] == function and frames[-1][1].endswith(path) for function, path in WAITS
        ):
            continue
        stages[stage_of(frames)] += int(count)
    return stages


def breakdown(samples: Counter[str], cpu_ms_per_event: float) -> list[StageCpu]:
    """Each stage's share of the samples and of the CPU per event, largest first."""
    total = sum(samples.values())
    if total == 0:
        return []
    return [
        StageCpu(stage, count / total, cpu_ms_per_event * count / total)
        for stage, count in samples.most_common()
    ]


@contextmanager
def profiled(pids: list[int], folder: Path, name: str) -> Iterator[list[Path]]:
    """py-spy records each of ``pids`` (rate 100, threads on the CPU only) until the block
    ends; yields the raw profiles' paths, written once it has."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}-{pid}.txt" for pid in pids]
    options = ["--rate", "100", "--full-filenames", "--format", "raw"]
    recorders = [
        subprocess.Popen(
            [str(PY_SPY), "record", "--pid", str(pid), *options, "--output", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for pid, path in zip(pids, paths, strict=True)
    ]
    try:
        yield paths
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)  # py-spy writes what it has
        for recorder in recorders:
            _, errors = recorder.communicate(timeout=60)
            if recorder.returncode not in (0, -2, 130):
                raise RuntimeError(f"py-spy failed ({recorder.returncode}): {errors.decode()}")
