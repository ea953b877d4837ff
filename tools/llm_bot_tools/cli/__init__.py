"""The development tools' ``llm-bot`` subcommands: :func:`add_commands` is what the service's
command line (:mod:`llm_bot.cli.dev_tools`) calls to offer them.

Only the argument parsers load here; each command imports what it runs when it runs, so having
the development tools installed costs the service's own commands (``llm-bot run`` among them)
nothing."""

from __future__ import annotations

import argparse
from typing import Any

from llm_bot_tools.cli.bench import add_bench_commands
from llm_bot_tools.cli.dev import add_dev_command, add_send_command
from llm_bot_tools.cli.evaluation import add_eval_commands

__all__ = ["add_commands"]


def add_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    add_send_command(commands)
    add_eval_commands(commands, parser_class)
    add_bench_commands(commands, parser_class)
    add_dev_command(commands)
