"""The ``llm-bot`` command line.

Operators meet the service here first, so mistakes get one line that says what is wrong and
exit code 2 (bad arguments or configuration), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from llm_bot.settings import Settings, SettingsError, load_settings

EXIT_USAGE = 2


class UsageError(Exception):
    """A command was asked for something it cannot do as asked; shown as one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument costs one line on stderr instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def command_schema(args: argparse.Namespace, settings: Settings) -> int:
    """Print the JSON Schema of the wire models producers and consumers agree on."""
    from llm_bot.events.models import CandidateV1, InternalEventV2

    schemas = {
        "InternalEventV2": InternalEventV2.model_json_schema(by_alias=True),
        "CandidateV1": CandidateV1.model_json_schema(by_alias=True),
    }
    chosen = schemas if args.model == "all" else {args.model: schemas[args.model]}
    print(json.dumps(chosen, indent=2))
    return 0


def command_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Create or upgrade the schema; running it again changes nothing."""
    from llm_bot.memory.migrate import migrate

    applied = migrate(require_database_url(settings))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'schema already current'}")
    return 0


def command_dev(args: argparse.Namespace, settings: Settings) -> int:
    """Run the local stack (and, once it exists, the worker) until interrupted."""
    from llm_bot.testing.dev_stack import run_dev_stack

    return run_dev_stack(settings, data_dir=args.data_dir, services_only=args.services_only)


def require_database_url(settings: Settings) -> str:
    if settings.database_url is None:
        raise UsageError(
            "DATABASE_URL is not set (try `llm-bot dev --services-only` for a local one)"
        )
    return settings.database_url.get_secret_value()


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="llm-bot", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    schema = commands.add_parser("schema", help="print the JSON Schema of the wire models")
    schema.add_argument("--model", choices=["all", "InternalEventV2", "CandidateV1"], default="all")
    schema.set_defaults(handler=command_schema)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    migrate.set_defaults(handler=command_migrate)

    dev = commands.add_parser("dev", help="run the local stack: Pub/Sub emulator, Postgres, model")
    dev.add_argument("--services-only", action="store_true", help="do not start the worker")
    dev.add_argument(
        "--data-dir", default=".llm-bot", help="where local state lives (default: %(default)s)"
    )
    dev.set_defaults(handler=command_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"llm-bot: configuration error: {error}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    handler: Callable[[argparse.Namespace, Settings], int] = args.handler
    try:
        return handler(args, settings)
    except UsageError as error:
        print(f"llm-bot: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
