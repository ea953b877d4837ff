"""The ``llm-bot`` command line: the parser, and one module per command group."""

from llm_bot.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
