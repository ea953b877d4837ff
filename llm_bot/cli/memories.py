"""``llm-bot memories ...``: operators read, fix and erase what the service remembers.

Every subcommand goes through the same :class:`~llm_bot.memory.store.UserMemories` the worker
uses, so an admin cannot reach across users either. Erasing a user is ``llm-bot forget-user``
(:mod:`llm_bot.cli.lifecycle`), which reaches every table, not only memories.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from llm_bot.cli.support import (
    UsageError,
    non_empty,
    positive,
    print_result,
    require_database_url,
    utf8_text,
)
from llm_bot.memory.validation import InvalidMemory, validate_memory
from llm_bot.settings import Settings
from llm_bot.text import printable

if TYPE_CHECKING:  # the store is imported when a command runs, not for parsing its arguments
    from llm_bot.memory.memories import Memory
    from llm_bot.memory.store import MemoryStore
    from llm_bot.memory.versions import Version

    Action = Callable[[MemoryStore, argparse.Namespace, Settings], Awaitable[Any]]


def add_memory_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    memories = commands.add_parser("memories", help="inspect and manage long-term memories")
    actions = memories.add_subparsers(dest="action", required=True, parser_class=parser_class)

    def action(name: str, handler: Action, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        sub.add_argument("--user", type=non_empty, required=True, help="user id")
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(handler=run_memory_action, memory_action=handler)
        return sub

    listing = action("list", list_memories, "list a user's memories")
    listing.add_argument("--limit", type=positive, default=100)
    search = action("search", search_memories, "search a user's memories")
    search.add_argument("query", type=utf8_text)
    search.add_argument("--limit", type=positive, default=10)
    get = action("get", get_memory, "show one memory")
    get.add_argument("key", type=utf8_text)
    get.add_argument(
        "--history", action="store_true", help="with its earlier texts and when each was current"
    )
    put = action("put", put_memory, "store or update a memory")
    put.add_argument("content", type=utf8_text)
    put.add_argument("--key", type=utf8_text, help="update this memory instead of adding one")
    put.add_argument("--metadata", type=utf8_text, default="{}", help="flat JSON object of strings")
    action("delete", delete_memory, "delete one memory").add_argument("key", type=utf8_text)


def run_memory_action(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot.db.embedding_space import EmbeddingModelMismatch
    from llm_bot.memory.wiring import open_memory_store

    require_database_url(settings)  # one line, not a traceback, when it is missing
    handler: Action = args.memory_action

    async def run() -> Any:
        async with open_memory_store(settings) as store:
            return await handler(store, args, settings)

    return print_result(
        run(), as_json=args.json, human=human, refused=(InvalidMemory, EmbeddingModelMismatch)
    )


def human(result: Any) -> str:
    if isinstance(result, list):
        return "\n".join(human(item) for item in result) or "(none)"
    if isinstance(result, dict) and "content" in result:
        score = f" {result['similarity']:.3f}" if "similarity" in result else ""
        line = (
            f"{result['key']}{score}  {result['content']}  {json.dumps(result.get('metadata', {}))}"
        )
        earlier = [
            f"  v{v['version']} {v['valid_from']} .. {v['valid_to']}  {v['content']}"
            for v in result.get("history", [])
        ]
        return "\n".join(printable(each) for each in (line, *earlier))
    return json.dumps(result)


def printed(record: Memory | Version) -> dict[str, Any]:
    """A memory or a version as the command prints it: where it was learned is
    ``learned_in`` in its output."""
    return {
        ("learned_in" if name == "visibility" else name): value
        for name, value in asdict(record).items()
    }


async def list_memories(store: MemoryStore, args: argparse.Namespace, settings: Settings) -> Any:
    return [printed(m) for m in await store.for_user(args.user).list_memories(limit=args.limit)]


async def search_memories(store: MemoryStore, args: argparse.Namespace, settings: Settings) -> Any:
    hits = await store.for_user(args.user).search(
        args.query, limit=args.limit, threshold=settings.memory_threshold()
    )
    return [
        {
            **asdict(h),
            "created_at": h.created_at.isoformat(),
            "updated_at": h.updated_at.isoformat(),
        }
        for h in hits
    ]


async def get_memory(store: MemoryStore, args: argparse.Namespace, settings: Settings) -> Any:
    memories = store.for_user(args.user)
    memory = await memories.get(args.key)
    if memory is None:
        raise UsageError(f"user {args.user!r} has no memory {args.key!r}")
    shown = printed(memory)
    if args.history:
        shown["history"] = [
            {
                **printed(version),
                "valid_from": version.valid_from.isoformat(),
                "valid_to": version.valid_to.isoformat(),
            }
            for version in await memories.history(args.key)
        ]
    return shown


async def put_memory(store: MemoryStore, args: argparse.Namespace, settings: Settings) -> Any:
    try:
        metadata = json.loads(args.metadata)
    except json.JSONDecodeError as error:
        raise InvalidMemory(f"--metadata is not JSON: {error.msg}") from None
    from llm_bot.memory.long_term import content_limit

    limit = content_limit(settings.memory_max_tokens, settings.injection_budget)
    content, checked, key = validate_memory(args.content, metadata, args.key, limit)
    key, effect = await store.for_user(args.user).put(content, checked, key)
    return {"key": key, "outcome": effect}  # the command's output names it "outcome"


async def delete_memory(store: MemoryStore, args: argparse.Namespace, settings: Settings) -> Any:
    return {"key": args.key, "deleted": await store.for_user(args.user).delete(args.key)}
