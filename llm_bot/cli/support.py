"""What every ``llm-bot`` subcommand module shares: the one-line usage error and its checks."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn

from llm_bot.settings import Settings

EXIT_USAGE = 2


class UsageError(Exception):
    """A command was asked for something it cannot do as asked; shown as one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument costs one line on stderr instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


# The largest count a command takes: PostgreSQL's integer. Every count ends up in a query, a
# loop or a list, where a larger one is a database error (or memory) after the minutes of setup.
MAX_COUNT = 2**31 - 1


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1, else a one-line error."""
    return _count(text, 1)


def at_least_zero(text: str) -> int:
    """An argparse type: a whole number of at least 0 (0 commonly skips a part), else a
    one-line error."""
    return _count(text, 0)


def _count(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        wanted = "positive" if minimum == 1 else f"at least {minimum}"
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a time to wait, in seconds: above 0 and at most the longest wait
    Python's clocks take (``threading.TIMEOUT_MAX``); NaN or infinity, which a socket or a
    wait refuses (or treats as no wait at all), are a one-line error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value <= threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"must be above 0 and at most {threading.TIMEOUT_MAX:.0f} seconds, got {text}"
        )
    return value


def non_empty(text: str) -> str:
    """An argparse type: an id that names something (an empty one would match nothing, or
    worse, rows whose id merely ends the same way), in UTF-8 as every stored id is: bytes that
    are not (a terminal in another encoding) reach Python as lone surrogates, which no query
    can send."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return utf8_text(text)


def utf8_text(text: str) -> str:
    """An argparse type: text in UTF-8, as every stored or sent text is (see :func:`non_empty`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"not valid UTF-8: {text!r}") from None
    return text


def output_file(text: str) -> Path:
    """An argparse type: a file a command writes when it is done (a plot, an export), in a
    directory that exists. Checked as the arguments are read, so a path that cannot be written
    is refused before the minutes of work whose result it would hold, not after them."""
    path = _not_a_directory(Path(text))
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"no directory {path.parent}")
    _writable(path.parent)
    return path


def file_in_output_dir(text: str) -> Path:
    """An argparse type: a file a command writes, making its directory if missing
    (:func:`output_dir`)."""
    path = _not_a_directory(Path(text))
    output_dir(str(path.parent))
    return path


def output_dir(text: str) -> Path:
    """An argparse type: a directory a command writes into, made if missing: it, or the
    nearest of its parents that exists, must be a directory this process can write in."""
    path = Path(text)
    existing = next(folder for folder in (path, *path.parents) if folder.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{existing} is a file, not a directory")
    _writable(existing)
    return path


def _not_a_directory(path: Path) -> Path:
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory, not a file")
    return path


def _writable(folder: Path) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {folder}")


def require_database_url(settings: Settings) -> str:
    if settings.database_url is None:
        raise UsageError(
            "DATABASE_URL is not set (try `llm-bot dev --services-only` for a local one)"
        )
    return settings.database_url.get_secret_value()


def print_result(
    action: Coroutine[Any, Any, Any],
    *,
    as_json: bool,
    human: Callable[[Any], str],
    refused: tuple[type[Exception], ...],
) -> int:
    """Run a command's ``action`` and print what it returns, as JSON or for a person; an
    error of the ``refused`` kinds is the caller's mistake: one line, exit 2."""
    try:
        result = asyncio.run(action)
    except refused as error:
        raise UsageError(str(error)) from None
    print(json.dumps(result, indent=2) if as_json else human(result))
    return 0
