"""``llm-bot console``: the operator's read-only web console (:mod:`llm_bot.console`)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from llm_bot.cli.support import UsageError, require_database_url
from llm_bot.settings import Settings


def add_console_command(commands: Any) -> None:
    console = commands.add_parser(
        "console",
        help="serve the read-only operator console (a user's memories, history, events; try a"
        " recall)",
    )
    console.set_defaults(handler=command_console)


def command_console(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot.console.serve import NoAuthenticator, authenticators_of, listening, serve

    require_database_url(settings)
    try:
        authenticators_of(settings)
    except NoAuthenticator as error:
        raise UsageError(str(error)) from None
    listener = listening(settings)
    print(
        f"console on http://{settings.console_host}:{settings.console_port}/ (Ctrl-C stops it)",
        flush=True,
    )
    asyncio.run(serve(settings, listener))
    return 0
