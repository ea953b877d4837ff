"""The ``llm-bot`` command line: the parser (:mod:`llm_bot.cli.parser`), and one module per
command group.

:func:`main` is the script's entry point. It sets what SIGTERM (and SIGHUP, a closed terminal)
does to ``llm-bot run`` before it imports the rest of the command line: importing takes a
second or two, a platform may stop an instance at any point of its start, and a worker that has
taken no work yet should then exit 0 at once rather than die of the signal, or wait at the
interpreter's exit for a thread that an import or a library started. To the development tools
that start servers of their own (``send``, ``eval``, ``bench``) SIGTERM and SIGHUP are Ctrl-C:
they stop what they started and exit 130, rather than die and leave an emulator, a Postgres or
a worker running.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

__all__ = ["main"]

# ``dev`` stops its stack on SIGTERM itself.
SERVER_STARTING_TOOLS = ("send", "eval", "bench")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _exit_before_start)
    elif args[:1] and args[0] in SERVER_STARTING_TOOLS:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.default_int_handler)
    from llm_bot.cli.parser import main as run_command_line

    return run_command_line(args)


def _exit_before_start(signum: int, frame: object) -> None:
    """Until the worker's event loop takes the signal over (it then drains): nothing to lose."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
