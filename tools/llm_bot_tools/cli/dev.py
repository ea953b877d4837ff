"""``llm-bot dev`` (the local stack) and ``llm-bot send`` (one prompt, its candidate)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from llm_bot.bus_names import is_pubsub_name, prefixed
from llm_bot.cli.support import (
    UsageError,
    non_empty,
    output_dir,
    positive_seconds,
    utf8_text,
)
from llm_bot.events.models import SOURCE
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.settings import Settings


def add_send_command(commands: Any) -> None:
    send = commands.add_parser("send", help="send one prompt and print the candidate")
    send.add_argument("text", type=utf8_text, help="the prompt")
    send.add_argument("--user", type=non_empty, required=True, help="user id of the sender")
    send.add_argument(
        "--thread", type=non_empty, required=True, help="channel (thread) the prompt is sent in"
    )
    send.add_argument("--local", action="store_true", help="run the graph in this process")
    send.add_argument("--timeout", type=positive_seconds, default=60.0, help="seconds to wait")
    send.add_argument(
        "--reply-subscription",
        type=subscription_name,
        default=f"{DEFAULT_EGRESS_TOPIC}-tap",
        help="subscription of the egress topic answers are read from, BUS_PREFIX in front"
        " (default: %(default)s; `llm-bot dev` makes it, on GCP see the README)",
    )
    send.set_defaults(handler=command_send)


def add_dev_command(commands: Any) -> None:
    dev = commands.add_parser("dev", help="run the local stack: Pub/Sub emulator, Postgres, model")
    dev.add_argument("--services-only", action="store_true", help="do not start the worker")
    dev.add_argument(
        "--data-dir",
        type=output_dir,
        default=".llm-bot",
        help="where local state lives (default: %(default)s)",
    )
    dev.set_defaults(handler=command_dev)


def command_dev(args: argparse.Namespace, settings: Settings) -> int:
    """Run the local stack (and, once it exists, the worker) until interrupted."""
    from llm_bot_tools.devstack.stack import run_dev_stack

    local_postgres_or_refuse()
    return run_dev_stack(settings, data_dir=args.data_dir, services_only=args.services_only)


def local_postgres_or_refuse() -> None:
    """Build (once) or find the PostgreSQL the embedded server runs, before anything starts:
    where none can run on this CPU, one line and exit 2, not a server that crashes later."""
    from llm_bot_tools.local.postgres_build import PgvectorUnavailable, embedded_install

    try:
        embedded_install()
    except PgvectorUnavailable as error:
        raise UsageError(str(error)) from None


def command_send(args: argparse.Namespace, settings: Settings) -> int:
    """Send one prompt and print the candidate that comes back (or why none did)."""
    from llm_bot_tools.devstack.send import (
        NoAnswer,
        ReplySubscriptionMissing,
        SendRequest,
        run_locally,
        send_and_wait,
    )
    from llm_bot_tools.local.prompt_events import prompt_event

    event = prompt_event(
        args.text, user=args.user, thread=args.thread, egress_topic=DEFAULT_EGRESS_TOPIC
    )
    if args.local:
        document = run_locally(settings, event)
    else:
        reply = prefixed(args.reply_subscription, settings.bus_prefix)
        try:
            document = send_and_wait(settings, SendRequest(event, reply, args.timeout))
        except ReplySubscriptionMissing as error:
            raise UsageError(str(error)) from None
        except NoAnswer as error:
            print(f"llm-bot: {error}", file=sys.stderr)
            return 1
    ours = [c for c in document.get("candidates", []) if c.get("source") == SOURCE]
    if ours:
        print(json.dumps(ours[-1], indent=2))
        return 0
    steps = [s for s in document["routing"]["slip"] if s.get("id") == SOURCE]
    print(json.dumps({"candidate": None, "step": steps[-1] if steps else None}, indent=2))
    return 1


def subscription_name(text: str) -> str:
    """An argparse type: a Pub/Sub subscription's id (not its path), else a one-line error
    rather than Pub/Sub's refusal once the event is built and the clients made."""
    if not is_pubsub_name(text):
        raise argparse.ArgumentTypeError(
            f"not a Pub/Sub subscription id (a letter, then 2 to 254 of letters, digits and"
            f" -_.~+%, not starting with goog): {text!r}"
        )
    return text
