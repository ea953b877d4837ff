"""``llm-bot reembed``: move every stored vector to the configured embedding model while the
workers keep running (:mod:`llm_bot.lifecycle.reembed`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from llm_bot.cli.support import positive, print_result, require_database_url
from llm_bot.settings import Settings


def add_reembed_command(commands: Any) -> None:
    command = commands.add_parser(
        "reembed",
        help="move memories and history to the configured embedding model, workers running",
    )
    command.add_argument(
        "--batch", type=positive, default=256, help="texts per embeddings request (256)"
    )
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.set_defaults(handler=command_reembed)


def command_reembed(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here, not for parsing: the embedder's client and the job are the heavy part.
    from psycopg import AsyncConnection

    from llm_bot.db.embedding_space import EmbeddingModelMismatch
    from llm_bot.lifecycle.reembed import reembed
    from llm_bot.llm.embeddings import EmbeddingError, embedder_from_settings

    database_url = require_database_url(settings)

    async def run() -> dict[str, Any]:
        embedder = embedder_from_settings(settings)
        try:
            async with await AsyncConnection.connect(database_url, autocommit=True) as connection:
                report = await reembed(connection, embedder, batch=args.batch, progress=_progress)
        finally:
            await embedder.close()
        return asdict(report)

    try:
        return print_result(
            run(), as_json=args.json, human=_human, refused=(EmbeddingModelMismatch,)
        )
    except EmbeddingError as error:
        print(f"llm-bot: embeddings failed ({error}); run again to resume", file=sys.stderr)
        return 1


def _progress(line: str) -> None:
    print(f"reembed: {line}", file=sys.stderr, flush=True)


def _human(result: dict[str, Any]) -> str:
    from llm_bot.lifecycle.reembed import ReembedReport

    report = ReembedReport(**result)
    done = "switched to" if report.switched else "filled vectors for"
    return (
        f"{done} {report.model} ({report.dimensions} dimensions): {report.vectors} vector(s)"
        f" made, {report.unembeddable} text(s) refused by the endpoint (found by their words)"
    )
