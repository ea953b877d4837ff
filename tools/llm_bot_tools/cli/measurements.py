"""What the measuring commands (``bench``, ``eval``) share: where their database comes from,
how they report progress, lists of numbers as arguments."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from llm_bot.cli.support import MAX_COUNT
from llm_bot.settings import Settings


@contextlib.contextmanager
def database_for_measurements(settings: Settings) -> Iterator[str]:
    """``DATABASE_URL``, or an embedded Postgres under ``.llm-bot/`` when it is unset. A
    measurement's scratch schema goes in a database beside it on the same server when its
    vector extension shares a schema with tables (:mod:`llm_bot_tools.local.scratch_schemas`)."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
        return
    from llm_bot_tools.cli.dev import local_postgres_or_refuse
    from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres

    local_postgres_or_refuse()
    with EmbeddedPostgres(Path(".llm-bot/postgres")) as postgres:
        yield postgres.url


def embeddings_for_measurements(settings: Settings) -> Settings:
    """``settings``, with the local embedder (all-MiniLM-L6-v2, installed with these tools) when
    nothing names an embeddings API: no ``MEMORY_EMBEDDING_PROVIDER``, ``OPENAI_API_KEY`` or
    ``OPENAI_BASE_URL``. As an unset ``DATABASE_URL`` means the embedded Postgres, a first
    measurement on a fresh clone runs on what is here, rather than timing out on
    api.openai.com; said on stderr."""
    named = "embedding_provider" in settings.model_fields_set
    if named or settings.openai_api_key is not None or settings.openai_base_url is not None:
        return settings
    progress("embeddings: the local all-MiniLM-L6-v2 (no embeddings API is configured)")
    return settings.model_copy(update={"embedding_provider": "local"})


def progress(line: str) -> None:
    """A line on stderr, so stdout holds only the result (``--json`` output stays parseable)."""
    print(f"# {line}", file=sys.stderr, flush=True)


N = TypeVar("N", int, float)


def number_list(
    convert: Callable[[str], N], minimum: N, example: str, maximum: N = MAX_COUNT
) -> Callable[[str], list[N]]:
    """An argparse type for comma-separated numbers from ``minimum`` to ``maximum``; NaN and
    infinity are refused with the rest, not found by the local model server's wait, which
    fails every answer on one, once the stack has started."""

    def parse(text: str) -> list[N]:
        try:
            values = [convert(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected numbers like {example}, got {text!r}"
            ) from None
        if not all(minimum <= value <= maximum for value in values):
            raise argparse.ArgumentTypeError(
                f"each value must be a number from {minimum} to {maximum}"
            )
        return values

    return parse
