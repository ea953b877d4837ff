"""``llm-bot maintain | forget-user | forget-thread | export-user``: stored data over months
(:mod:`llm_bot.lifecycle`). They need only ``DATABASE_URL``: no model, no embeddings."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_bot.cli.support import non_empty, output_file, print_result, require_database_url
from llm_bot.clock import iso_timestamp, utc_now
from llm_bot.settings import Settings

if TYPE_CHECKING:  # the jobs are imported when a command runs, not for parsing its arguments
    from psycopg import AsyncConnection

    from llm_bot.lifecycle.erasure import Receipt

    Action = Callable[[AsyncConnection[Any], argparse.Namespace, Settings], Awaitable[Any]]


def add_lifecycle_commands(commands: Any) -> None:
    def command(name: str, action: Action, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.set_defaults(handler=run_lifecycle_action, lifecycle_action=action)
        return parser

    command(
        "maintain",
        run_maintain,
        "delete what the retention settings no longer keep; index deep users' older turns",
    )
    command("forget-user", run_forget_user, "erase every row held about a user").add_argument(
        "user", type=non_empty, help="user id"
    )
    command("forget-thread", run_forget_thread, "erase one conversation").add_argument(
        "thread", type=non_empty, help="thread id (as in conversation_turns.thread_id)"
    )
    export = commands.add_parser("export-user", help="write everything held about a user as JSON")
    export.add_argument("user", type=non_empty, help="user id")
    export.add_argument(
        "--output", type=output_file, help="file to write (default: standard output)"
    )
    export.set_defaults(handler=command_export_user)


def run_lifecycle_action(args: argparse.Namespace, settings: Settings) -> int:
    from psycopg import AsyncConnection

    database_url = require_database_url(settings)
    action: Action = args.lifecycle_action

    async def run() -> Any:
        async with await AsyncConnection.connect(database_url, autocommit=True) as connection:
            return await action(connection, args, settings)

    return print_result(run(), as_json=args.json, human=_human, refused=())


async def run_maintain(
    connection: AsyncConnection[Any], args: argparse.Namespace, settings: Settings
) -> dict[str, Any]:
    from llm_bot.lifecycle.retention import RetentionPolicy, maintain
    from llm_bot.lifecycle.turn_backfill import index_deep_users

    now = utc_now()
    policy = RetentionPolicy.from_settings(settings)
    deleted = await maintain(connection, policy, now, _progress)
    indexed = await index_deep_users(connection, policy.batch_rows, _progress)
    return {
        "subject": f"retention as of {iso_timestamp(now)}",
        "deleted": deleted,
        "indexed": indexed,
    }


async def run_forget_user(
    connection: AsyncConnection[Any], args: argparse.Namespace, settings: Settings
) -> dict[str, Any]:
    from llm_bot.lifecycle.erasure import forget_user

    return _receipt(await forget_user(connection, args.user))


async def run_forget_thread(
    connection: AsyncConnection[Any], args: argparse.Namespace, settings: Settings
) -> dict[str, Any]:
    from llm_bot.lifecycle.erasure import forget_thread

    return _receipt(await forget_thread(connection, args.thread))


def command_export_user(args: argparse.Namespace, settings: Settings) -> int:
    """The document goes to ``--output`` or standard output; how many rows, to standard error."""
    from psycopg import AsyncConnection

    from llm_bot.lifecycle.export import export_user

    database_url = require_database_url(settings)

    async def run() -> dict[str, Any]:
        async with await AsyncConnection.connect(database_url, autocommit=True) as connection:
            return await export_user(connection, args.user)

    document = asyncio.run(run())
    text = json.dumps(document, indent=2, ensure_ascii=False)
    if args.output is None:
        print(text)
    else:
        _write_private(args.output, text + "\n")
    rows = ", ".join(f"{table} {len(found)}" for table, found in document["tables"].items())
    print(f"exported user {args.user}: {rows}", file=sys.stderr)
    return 0


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by its owner alone: everything held about a person is
    not for the other accounts of the machine, as a file made under the usual umask would be.
    A file already there is made private before it is written."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(text)


def _receipt(receipt: Receipt) -> dict[str, Any]:
    return {
        "subject": receipt.subject,
        "at": iso_timestamp(utc_now()),
        "deleted": receipt.deleted,
        "total": receipt.total,
    }


def _progress(line: str) -> None:
    print(f"maintain: {line}", file=sys.stderr, flush=True)


def _human(result: dict[str, Any]) -> str:
    lines = [f"{result['subject']}: deleted"]
    lines += [f"  {table:<24} {count:>8}" for table, count in result["deleted"].items()]
    if "indexed" in result:
        lines.append(f"indexed {result['indexed']} turn(s) of deep users")
    return "\n".join(lines)
