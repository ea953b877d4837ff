"""``llm-bot explain CORRELATION_ID [--user ID] [--json]``: why an answer is what it is, read
from its explanation (:mod:`llm_bot.explanation`): the prompt as the model saw it, part by part
with where each part came from and why it was chosen, then what was left out, the answer and
the tool calls. Needs only ``DATABASE_URL``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from llm_bot.cli.support import non_empty, require_database_url
from llm_bot.settings import Settings


def add_explain_command(commands: Any) -> None:
    parser = commands.add_parser(
        "explain", help="show what reached the model for an answer, and what was left out"
    )
    parser.add_argument("correlation_id", type=non_empty, help="the event's correlationId")
    parser.add_argument("--user", type=non_empty, help="the requesting user (default: any)")
    parser.add_argument("--json", action="store_true", help="print the explanation as JSON")
    parser.set_defaults(handler=command_explain)


def command_explain(args: argparse.Namespace, settings: Settings) -> int:
    from psycopg import AsyncConnection

    from llm_bot.explanation.reader import explanation_for
    from llm_bot.explanation.render import render_text

    database_url = require_database_url(settings)

    async def read() -> Any:
        async with await AsyncConnection.connect(database_url, autocommit=True) as connection:
            return await explanation_for(
                connection, args.correlation_id, user_id=args.user, agent=settings.agent_name
            )

    explanation = asyncio.run(read())
    if explanation is None:
        print(
            f"llm-bot explain: no explanation of {args.correlation_id!r} (not answered yet,"
            " LLM_BOT_EXPLANATIONS off, erased or past retention)",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(explanation.as_json(), indent=2, ensure_ascii=False))
    else:
        print(render_text(explanation))
    return 0
