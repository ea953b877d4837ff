"""Notice at once when a local PostgreSQL server crashes, and say which line of its log says so.

A backend killed by a signal (SIGILL from a library built for another CPU, SIGSEGV, the OOM
killer's SIGKILL) makes the postmaster end every session and restart: clients see only "the
connection is closed", long after, and the reason sits in the server's log. The watch reads the
log as it grows (each byte once) and checks the postmaster is alive, and hands the first line
that tells of a crash to a callback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from llm_bot_tools.local.processes import running

# PostgreSQL's own wording: a child ended by a signal ("client backend (PID 7) was terminated
# by signal 4: Illegal instruction"), by an exception (Windows), or a PANIC.
CRASH_MARKS = ("was terminated by signal", "was terminated by exception", "PANIC:")
_POLL_S = 0.1
_READ_BYTES = 1 << 16


class CrashWatch:
    """A daemon thread over one server's log and postmaster; ``stop`` before stopping the
    server on purpose, so a wanted stop is not reported."""

    def __init__(self, log: Path, postmaster_pid: int, on_crash: Callable[[str], None]) -> None:
        self._log = log
        self._pid = postmaster_pid
        self._on_crash = on_crash
        self._offset = log.stat().st_size if log.exists() else 0
        self._partial = b""
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="postgres-crash-watch", daemon=True
        )
        self.crash_line: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _watch(self) -> None:
        while not self._stopping.wait(_POLL_S):
            line = self._crash_in_log() or self._postmaster_gone()
            if line is not None and not self._stopping.is_set():
                self.crash_line = line
                self._on_crash(line)
                return

    def _crash_in_log(self) -> str | None:
        try:
            with self._log.open("rb") as log:
                log.seek(self._offset)
                while chunk := log.read(_READ_BYTES):
                    self._offset += len(chunk)
                    if (line := self._crash_in(chunk)) is not None:
                        return line
        except OSError:
            return None
        return None

    def _crash_in(self, chunk: bytes) -> str | None:
        *complete, partial = (self._partial + chunk).split(b"\n")
        self._partial = partial[-_READ_BYTES:]  # a line longer than that: only its tail matters
        for raw in complete:
            line = raw.decode(errors="replace").strip()
            if any(mark in line for mark in CRASH_MARKS):
                return line
        return None

    def _postmaster_gone(self) -> str | None:
        if running(self._pid):
            return None
        return f"postgres (pid {self._pid}) exited; its log: {self._log}"
