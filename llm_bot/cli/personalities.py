"""``llm-bot personalities ...``: the personalities a ``personality`` annotation may name.

BitBrat's rules name the bot's personality (``{"kind": "personality", "value": "bratty"}``);
the worker answers with the text of that name's highest active version
(:mod:`llm_bot.db.personalities`). ``import`` reads BitBrat's own personality documents
(``personality.v1.schema.json``), one per file or a list of them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection

from llm_bot.cli.support import (
    UsageError,
    positive,
    print_result,
    require_database_url,
    utf8_text,
)
from llm_bot.db import personalities as store
from llm_bot.db.personalities import InvalidPersonality, Personality
from llm_bot.settings import Settings

Action = Callable[[AsyncConnection[Any], argparse.Namespace], Awaitable[Any]]


def add_personality_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("personalities", help="manage the personalities events may name")
    actions = group.add_subparsers(dest="action", required=True, parser_class=parser_class)

    def action(name: str, handler: Action, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(handler=run_personality_action, personality_action=handler)
        return sub

    listing = action("list", list_personalities, "list every stored version")
    listing.add_argument("--name", type=utf8_text, help="only this personality's versions")
    get = action("get", get_personality, "show one personality (default: its highest version)")
    get.add_argument("name", type=utf8_text)
    get.add_argument("--version", type=positive)
    put = action("put", put_personality, "store a version of a personality")
    put.add_argument("name", type=utf8_text)
    text = put.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="the personality's text")
    text.add_argument("--file", type=Path, help="read the text from this file")
    put.add_argument("--version", type=positive, help="default: one past the highest")
    put.add_argument("--status", choices=store.STATUSES, default="active")
    put.add_argument("--model", help="model used for events with this personality")
    put.add_argument("--platform", help="BitBrat's platform field (kept, not used)")
    put.add_argument("--tags", help="comma-separated tags")
    put.add_argument("--description")
    put.add_argument("--author")
    delete = action("delete", delete_personality, "delete a version (default: every version)")
    delete.add_argument("name", type=utf8_text)
    delete.add_argument("--version", type=positive)
    imported = action("import", import_personalities, "store BitBrat personality JSON files")
    imported.add_argument("paths", nargs="+", type=Path, metavar="PATH")


def run_personality_action(args: argparse.Namespace, settings: Settings) -> int:
    database_url = require_database_url(settings)
    handler: Action = args.personality_action

    async def run() -> Any:
        async with await AsyncConnection.connect(database_url, autocommit=True) as connection:
            return await handler(connection, args)

    return print_result(run(), as_json=args.json, human=human, refused=(InvalidPersonality,))


def human(result: Any) -> str:
    if isinstance(result, list):
        return "\n".join(human(item) for item in result) or "(none)"
    if isinstance(result, dict) and "text" in result:
        text = " ".join(result["text"].split())
        text = text if len(text) <= 72 else text[:71] + "…"
        model = f" model={result['model']}" if result.get("model") else ""
        return f"{result['name']} v{result['version']} {result['status']}{model}  {text}"
    return json.dumps(result)


async def list_personalities(connection: AsyncConnection[Any], args: argparse.Namespace) -> Any:
    return [p.document() for p in await store.list_personalities(connection, args.name)]


async def get_personality(connection: AsyncConnection[Any], args: argparse.Namespace) -> Any:
    found = await store.get(connection, args.name, args.version)
    if found is None:
        version = f" version {args.version}" if args.version else ""
        raise UsageError(f"no personality {args.name!r}{version}")
    return found.document()


async def put_personality(connection: AsyncConnection[Any], args: argparse.Namespace) -> Any:
    text = args.text if args.file is None else _read(args.file)
    version = args.version or await store.next_version(connection, args.name)
    tags = tuple(t.strip() for t in args.tags.split(",") if t.strip()) if args.tags else None
    personality = Personality(
        name=args.name,
        version=version,
        status=args.status,
        text=text,
        platform=args.platform,
        model=args.model,
        tags=tags,
        description=args.description,
        author=args.author,
    )
    return (await store.put(connection, personality)).document()


async def delete_personality(connection: AsyncConnection[Any], args: argparse.Namespace) -> Any:
    deleted = await store.delete(connection, args.name, args.version)
    return {"name": args.name, "version": args.version, "deleted": deleted}


async def import_personalities(connection: AsyncConnection[Any], args: argparse.Namespace) -> Any:
    """Every document of every file is checked before any is stored; one version given twice
    is refused, as the later would replace the earlier while both were reported stored."""
    documents: list[Personality] = []
    seen: set[tuple[str, int]] = set()
    for path in args.paths:
        try:
            loaded = json.loads(_read(path))
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: not JSON: {error.msg} (line {error.lineno})") from None
        for document in loaded if isinstance(loaded, list) else [loaded]:
            try:
                personality = store.import_document(document)
            except InvalidPersonality as error:
                raise UsageError(f"{path}: {error}") from None
            if (personality.name, personality.version) in seen:
                raise UsageError(
                    f"{path}: personality {personality.name!r} version {personality.version}"
                    " is given twice"
                )
            seen.add((personality.name, personality.version))
            documents.append(personality)
    async with connection.transaction():
        return [(await store.put(connection, p)).document() for p in documents]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
