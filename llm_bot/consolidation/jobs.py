"""A consolidation job: one thread's window of turns ``(from_seq, to_seq]`` whose session closed.

The window is the job's identity: the sweep hands each window out once, and a copy of a job
(a second sweep that read the same row, a redelivery) has the same key in the processed-events
ledger (:mod:`llm_bot.db.processed_events`), so it changes nothing a second time. The ledger
row is a DM's user's, or a shared channel's under the channel's id, as the thread's row is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeGuard

from llm_bot.db.processed_events import thread_key
from llm_bot.errors import DeadLetterError
from llm_bot.events.identity import is_shared_thread
from llm_bot.events.inbound import EventKey
from llm_bot.memory.derived import JOB_STEP, job_id

# Ids of threads and users are bounded where events come in (llm_bot.events.limits); a job
# naming a longer one was not written by the sweep.
MAX_ID_CHARS = 1000
MAX_JOB_BYTES = 4 * MAX_ID_CHARS
# The type attribute of a job on its topic.
JOB_TYPE = "llmbot.consolidate.v1"


class InvalidJob(DeadLetterError):
    """The message is no job the sweep writes: no delivery of it can succeed."""

    kind = "invalid_job"


@dataclass(frozen=True)
class Job:
    thread_id: str
    from_seq: int
    to_seq: int

    @property
    def window(self) -> str:
        return f"{self.from_seq}-{self.to_seq}"

    @property
    def key(self) -> EventKey:
        """The job's row in the processed-events ledger, where its thread's row is."""
        return thread_key(self.thread_id, job_id(self.thread_id, self.window), JOB_STEP)

    @property
    def is_dm(self) -> bool:
        return not is_shared_thread(self.thread_id)


def encode_job(job: Job) -> bytes:
    body = {"threadId": job.thread_id, "from": job.from_seq, "to": job.to_seq}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_job(data: bytes, max_turns: int) -> Job:
    """The job in ``data``; :class:`InvalidJob` for anything else, a window of more than
    ``max_turns`` turns too (``LLM_BOT_CONSOLIDATION_TURN_CAP``: the sweep writes none, and
    its job would send the model the whole thread and redo windows already consolidated)."""
    if len(data) > MAX_JOB_BYTES:
        raise InvalidJob(f"a job of {len(data)} bytes, over {MAX_JOB_BYTES}")
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InvalidJob(f"not JSON: {error}") from None
    if not isinstance(body, dict):
        raise InvalidJob("not a JSON object")
    thread_id = body.get("threadId")
    from_seq, to_seq = body.get("from"), body.get("to")
    if not _is_id(thread_id):
        raise InvalidJob(f"threadId must be a string of 1 to {MAX_ID_CHARS} characters")
    if not (_is_seq(from_seq) and _is_seq(to_seq)):
        raise InvalidJob("from and to must be non-negative integers")
    if to_seq <= from_seq:
        raise InvalidJob("an empty window")
    if to_seq - from_seq > max_turns:
        raise InvalidJob(f"a window of {to_seq - from_seq} turns, over the turn cap of {max_turns}")
    return Job(thread_id, from_seq, to_seq)


def _is_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS


def _is_seq(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
