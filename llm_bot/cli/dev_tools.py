"""The development tools' commands (``send``, ``eval``, ``bench``, ``dev``) in the one
``llm-bot`` command.

The development tools are a distribution of their own, llm-bot-tools (``tools/`` in the
repository), so the service's wheel and image carry neither them nor what they need (an
embedded Postgres, the emulator's launcher, matplotlib). Where they are installed they add
their commands here; where they are not, each of their names answers in one line how to install
them, exit 2.

They are found by importing them by name: an installed distribution and a checkout on
``PYTHONPATH`` both work, and a development tools package that fails to import costs the
service's own commands nothing, only the development tools' commands say why.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

DEV_TOOLS_MODULE = "llm_bot_tools.cli"
DEV_TOOL_COMMANDS = ("send", "eval", "bench", "dev")
INSTALL = "pip install -e ./tools in a checkout of the repository (`make install` does it)"

AddCommands = Callable[[Any, type[argparse.ArgumentParser]], None]


def add_dev_tool_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The development tools' own commands when they import, else a stand-in for each of their
    names."""
    try:
        add_commands: AddCommands = importlib.import_module(DEV_TOOLS_MODULE).add_commands
    except ImportError as error:
        add_missing(commands, missing_message(error))
        return
    add_commands(commands, parser_class)


def missing_message(error: ImportError) -> str:
    if error.name == DEV_TOOLS_MODULE.partition(".")[0]:
        return f"the development tools (llm-bot-tools) are not installed: {INSTALL}"
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"the development tools (llm-bot-tools) do not import ({reason}): {INSTALL}"


def add_missing(commands: Any, message: str) -> None:
    """Each development tool command takes any arguments (so ``send -h`` or a typo reaches the
    message rather than argparse's complaint) and stands for ``message``."""
    for name in DEV_TOOL_COMMANDS:
        stand_in = commands.add_parser(
            name,
            help="a development tool; needs llm-bot-tools (not installed)",
            add_help=False,
            prefix_chars="\0",
        )
        stand_in.add_argument("arguments", nargs="*")
        stand_in.set_defaults(dev_tools_missing=f"{name}: {message}")


def dev_tools_missing(args: argparse.Namespace) -> str | None:
    """Why the command ``args`` name cannot run: a development tool command without the
    development tools."""
    message: str | None = getattr(args, "dev_tools_missing", None)
    return message
