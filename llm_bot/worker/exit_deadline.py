"""A stop that must end the process in bounded time, whatever a library thread is doing.

A start abandoned by SIGTERM closes what it had opened, but a thread of the default executor may
be inside a call nothing can interrupt (a model loading, a connect, a gRPC call with its own
timeout), and both the event loop's close and the interpreter's exit wait for such threads. The
worker has taken no work at that point, so once the deadline passes the process ends with exit 0,
after writing every thread's stack to stderr so the log says what held it. A stopping worker's
close of what it opened is bounded the same way, once its messages are finished or handed back;
a close that ends in time disarms the deadline.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading

logger = logging.getLogger(__name__)


def exit_after(deadline_s: float, reason: str) -> threading.Event:
    """Arm a daemon thread that ends the process with exit 0 in ``deadline_s`` seconds, unless
    the event returned is set first."""
    disarmed = threading.Event()
    threading.Thread(
        target=_exit_when_due,
        args=(deadline_s, reason, disarmed),
        name="exit-deadline",
        daemon=True,
    ).start()
    return disarmed


def _exit_when_due(deadline_s: float, reason: str, disarmed: threading.Event) -> None:
    if disarmed.wait(deadline_s):
        return
    logger.warning("%s: not done after %.1f s, exiting; threads follow", reason, deadline_s)
    sys.stdout.flush()
    faulthandler.dump_traceback(all_threads=True)
    sys.stderr.flush()
    os._exit(0)
