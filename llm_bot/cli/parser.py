"""The ``llm-bot`` command line.

Operators meet the service here first, so mistakes get one line that says what is wrong and
exit code 2 (bad arguments or configuration), and any other failure (a database that cannot be
reached, a library's error) one line and exit code 1 (:mod:`llm_bot.cli.failures`): never a
traceback, never a secret.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Sequence

from llm_bot.cli.console import add_console_command
from llm_bot.cli.dev_tools import add_dev_tool_commands, dev_tools_missing
from llm_bot.cli.explain import add_explain_command
from llm_bot.cli.failures import masked, report_failure, secrets_of
from llm_bot.cli.lifecycle import add_lifecycle_commands
from llm_bot.cli.memories import add_memory_commands
from llm_bot.cli.personalities import add_personality_commands
from llm_bot.cli.reembed import add_reembed_command
from llm_bot.cli.support import EXIT_USAGE, OneLineParser, UsageError, require_database_url
from llm_bot.cli.worker import add_worker_commands
from llm_bot.settings import Settings, SettingsError, load_settings


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
    """Create or upgrade the schema and record the embedding model of the stored vectors
    (their size is ``MEMORY_EMBEDDING_DIMENSIONS``, else the model is asked for it); running it
    again changes nothing. An unreachable database fails within ``DATABASE_CONNECT_TIMEOUT_S``."""
    from llm_bot.db.migrate import migrate
    from llm_bot.memory.wiring import set_up_memory_store

    applied = migrate(require_database_url(settings), settings.db_connect_timeout_s)
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'schema already current'}")
    dimensions = asyncio.run(set_up_memory_store(settings))
    print(f"memory store ready: {dimensions}-dimension vectors")
    return 0


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="llm-bot", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    schema = commands.add_parser("schema", help="print the JSON Schema of the wire models")
    schema.add_argument("--model", choices=["all", "InternalEventV2", "CandidateV1"], default="all")
    schema.set_defaults(handler=command_schema)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    migrate.set_defaults(handler=command_migrate)

    add_memory_commands(commands, OneLineParser)
    add_personality_commands(commands, OneLineParser)
    add_reembed_command(commands)
    add_lifecycle_commands(commands)
    add_console_command(commands)
    add_explain_command(commands)
    add_dev_tool_commands(commands, OneLineParser)
    add_worker_commands(commands)
    return parser


# Long-running commands, whose operators want to see a pool retrying while it serves.
SERVING_COMMANDS = frozenset({"run", "dev", "console"})


def configure_logging(level: str, command: str) -> None:
    """Our logs at ``level``; chatty client libraries only when something goes wrong. A
    one-shot command's pool does not log each failed connection attempt: the command fails
    with one line that says why."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "pgserver"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    if command not in SERVING_COMMANDS:
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (missing := dev_tools_missing(args)) is not None:
        print(f"llm-bot: {missing}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"llm-bot: configuration error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, UnicodeDecodeError) as error:  # .env unreadable; its text may be secret
        print(
            f"llm-bot: configuration error: cannot read .env ({type(error).__name__})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    configure_logging(settings.log_level, args.command)
    handler: Callable[[argparse.Namespace, Settings], int] = args.handler
    try:
        return handler(args, settings)
    except UsageError as error:
        print(f"llm-bot: error: {masked(str(error), secrets_of(settings))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # whatever a library raised: one line, never a traceback
        return report_failure(error, settings)
