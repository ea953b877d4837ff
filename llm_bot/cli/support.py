"""What every ``llm-bot`` subcommand module shares: the one-line usage error and its checks."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from llm_bot.settings import Settings

EXIT_USAGE = 2


class UsageError(Exception):
    """A command was asked for something it cannot do as asked; shown as one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument costs one line on stderr instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def require_database_url(settings: Settings) -> str:
    if settings.database_url is None:
        raise UsageError(
            "DATABASE_URL is not set (try `llm-bot dev --services-only` for a local one)"
        )
    return settings.database_url.get_secret_value()


@contextlib.contextmanager
def database_for_measurements(settings: Settings) -> Iterator[str]:
    """``DATABASE_URL``, or an embedded Postgres under ``.llm-bot/`` when it is unset."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
        return
    from llm_bot.local.embedded_postgres import EmbeddedPostgres

    with EmbeddedPostgres(Path(".llm-bot/postgres")) as postgres:
        yield postgres.url
