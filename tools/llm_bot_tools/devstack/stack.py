"""``llm-bot dev``: the whole local stack on loopback, until Ctrl-C or SIGTERM.

Starts the Pub/Sub emulator (with the input, egress and dead-letter topics and their
subscriptions), an embedded Postgres with pgvector (migrated), and — when no ``OPENAI_API_KEY``
is set — the local OpenAI-compatible server. It prints ``export`` lines first, so another
shell can use the same stack, then checks each service answers, and stops everything on the
way out so no process is left behind. Unless ``--services-only``, it then runs the worker in
this process and shows a short conversation going through it (prompts in, candidates back on
the egress tap) and what to try next, before it keeps serving. When the embedded Postgres
crashes or restarts, it prints the server log's line that says so, stops the other services
and exits 1 at once, instead of letting every client wait on a closed connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import psycopg
from prometheus_client import CollectorRegistry

from llm_bot.bus_names import prefixed
from llm_bot.db.migrate import migrate
from llm_bot.events.routing import DEFAULT_EGRESS_TOPIC
from llm_bot.explanation.reader import explanation_for
from llm_bot.explanation.render import render_text
from llm_bot.settings import Settings, load_settings
from llm_bot.telemetry.metrics import setup_metrics
from llm_bot.telemetry.traces import setup_tracing
from llm_bot.worker import Worker, install_signal_handlers
from llm_bot_tools.devstack.send import SendRequest, send_and_wait
from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator, Topology, tap_subscription_name


@dataclass(frozen=True)
class DevStack:
    exports: dict[str, str]
    topology: Topology


EXIT_POSTGRES_CRASHED = 1


@contextlib.contextmanager
def local_stack(
    settings: Settings, data_dir: Path, on_crash: Callable[[str], None] | None = None
) -> Iterator[DevStack]:
    """The services, started in order and stopped in reverse, however the block ends;
    ``on_crash`` hears of a crash of the embedded Postgres (from a thread of its own)."""
    with contextlib.ExitStack() as stack:
        emulator = stack.enter_context(
            PubSubEmulator(data_dir / "pubsub", project=settings.google_cloud_project)
        )
        topology = emulator.create_topology(
            input_topic=prefixed(settings.input_topic, settings.bus_prefix),
            subscription=prefixed(settings.subscription, settings.bus_prefix),
            deadletter_topic=prefixed(settings.deadletter_topic, settings.bus_prefix),
            output_topics=[prefixed(DEFAULT_EGRESS_TOPIC, settings.bus_prefix)],
        )
        # Consolidation's jobs (off unless LLM_BOT_CONSOLIDATION is set): a topic of their own.
        emulator.create_topology(
            input_topic=prefixed(settings.consolidation_topic, settings.bus_prefix),
            subscription=prefixed(settings.consolidation_subscription, settings.bus_prefix),
            deadletter_topic=prefixed(settings.deadletter_topic, settings.bus_prefix),
        )
        postgres = stack.enter_context(EmbeddedPostgres(data_dir / "postgres"))
        if on_crash is not None:
            postgres.watch_crashes(on_crash)
        migrate(postgres.url)
        exports = {
            **emulator.env(),
            "DATABASE_URL": postgres.url,
            "LLM_BOT_INPUT_TOPIC": settings.input_topic,
            "LLM_BOT_SUBSCRIPTION": settings.subscription,
            "LLM_BOT_DEADLETTER_TOPIC": settings.deadletter_topic,
            "LLM_BOT_CONSOLIDATION_TOPIC": settings.consolidation_topic,
            "LLM_BOT_CONSOLIDATION_SUBSCRIPTION": settings.consolidation_subscription,
            "LLM_BOT_EGRESS_TAP": topology.output_subscriptions[
                prefixed(DEFAULT_EGRESS_TOPIC, settings.bus_prefix)
            ],
            "LLM_BOT_DEADLETTER_TAP": topology.deadletter_subscription,
        }
        if settings.openai_api_key is None:
            model = stack.enter_context(LocalModelServer(model=settings.openai_model))
            exports |= {
                "OPENAI_BASE_URL": model.base_url,
                "OPENAI_API_KEY": "local-test-key",
                "MEMORY_EMBEDDING_PROVIDER": "local",
            }
        yield DevStack(exports, topology)


def check_stack(stack: DevStack) -> list[str]:
    """One line per service, proving it answers over a real connection."""
    exports = stack.exports
    with psycopg.connect(exports["DATABASE_URL"]) as connection:
        row = connection.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
    lines = [f"postgres: vector {row[0] if row else 'MISSING'}"]
    host, subscription = exports["PUBSUB_EMULATOR_HOST"], stack.topology.input_subscription
    lines.append(f"pubsub: emulator at {host}, input subscription {subscription}")
    if "OPENAI_BASE_URL" in exports:
        client = openai.OpenAI(
            base_url=exports["OPENAI_BASE_URL"], api_key=exports["OPENAI_API_KEY"]
        )
        reply = client.chat.completions.create(
            model="local-test-model", messages=[{"role": "user", "content": "ping"}]
        )
        lines.append(f"model: local server answered {reply.choices[0].message.content!r}")
    return lines


# A short conversation `make run` sends through the worker, shaped as BitBrat's router shapes
# chat (the words in message.text, an instruction, a personality): (user, thread, words). The local
# model calls upsertMemory on the cue in the first prompt; the memory then reaches the model in
# another thread for Ada, never for Bob, and the demo ends by explaining Ada's last answer
# (``llm-bot explain``): the memory, its scores and the words it was read from.
DEMO_PERSONALITY = "You are Brat, the channel's cheerful co-host. Keep answers to one sentence."
DEMO_CONVERSATION = (
    ("ada", "lobby", 'Hi, I am Ada. [[tool:upsertMemory {"content": "Ada loves sailing"}]]'),
    ("bob", "harbour", "What do I love doing, sailing perhaps?"),
    ("ada", "harbour", "What do I love doing, sailing perhaps?"),
)


NEXT_STEPS = (
    "# next: in another shell, paste the export lines above, then"
    " `llm-bot send --user ada --thread lobby 'What do I love?'`,"
    " `llm-bot explain CORRELATION_ID` or `llm-bot memories list --user ada`;"
    " docs/architecture.md maps the code"
)


# SIGHUP: a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_dev_stack(settings: Settings, data_dir: Path, services_only: bool) -> int:
    """Start the stack, then serve until a stop signal (exit 0). A stop signal while the
    services start is Ctrl-C there: those started so far stop as the start unwinds, and the
    command exits 130 (:mod:`llm_bot.cli`), rather than finish starting and serve on with the
    signal set aside where nothing reads it."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.default_int_handler)
    stop = threading.Event()
    services = contextlib.ExitStack()

    def abort(line: str) -> None:
        """Every client of a crashed server would only see its connection closed, long
        after: say why now, stop what was started, and end the process."""
        print(f"llm-bot: the local Postgres crashed: {line}", file=sys.stderr, flush=True)
        services.close()
        os._exit(EXIT_POSTGRES_CRASHED)

    with services:
        stack = services.enter_context(local_stack(settings, data_dir.resolve(), abort))
        for name, value in stack.exports.items():
            print(f"export {name}={shlex.quote(value)}")
        for line in check_stack(stack):
            print(f"# {line}")
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: stop.set())
        if services_only:
            print("# local stack ready; Ctrl-C stops it", flush=True)
            stop.wait()
        else:
            # The worker and the demo in this process use the stack, like a pasted shell would.
            os.environ.update(stack.exports)
            traces = data_dir / "traces.log"
            with traces.open("a", encoding="utf-8") as console:
                tracing = setup_tracing(console=console)
                print(f"# traces: {traces}; metrics: http://127.0.0.1:{settings.port}/metrics")
                asyncio.run(_serve_with_demo(load_settings(), stack, setup_metrics(), stop))
                if tracing is not None:  # always, with a console
                    tracing.shutdown()  # flushes the spans still batched
    print("# local stack stopped", file=sys.stderr)
    return 0


async def explained(url: str, agent: str, correlation_id: str) -> list[str]:
    """The explanation of an answer, as ``llm-bot explain`` prints it, line by line."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        explanation = await explanation_for(connection, correlation_id, agent=agent)
    if explanation is None:
        return ["(no explanation stored: LLM_BOT_EXPLANATIONS is off)"]
    return render_text(explanation).splitlines()


async def _serve_with_demo(
    settings: Settings, stack: DevStack, registry: CollectorRegistry, stopped: threading.Event
) -> None:
    """Run the worker until Ctrl-C/SIGTERM/SIGHUP, after showing a few events going through it;
    ``stopped`` is set by a stop signal that came before this loop took the signals over."""
    stop = asyncio.Event()
    install_signal_handlers(stop)
    if stopped.is_set():
        return
    async with Worker(settings, metrics_registry=registry) as worker:
        print(f"# worker running (health on port {settings.port})", flush=True)
        reply_subscription = tap_subscription_name(
            prefixed(DEFAULT_EGRESS_TOPIC, settings.bus_prefix)
        )
        last = ""
        for user, thread, text in DEMO_CONVERSATION:
            event = prompt_event(
                text,
                user=user,
                thread=thread,
                egress_topic=DEFAULT_EGRESS_TOPIC,
                personality=DEMO_PERSONALITY,
            )
            request = SendRequest(event, reply_subscription, timeout_s=60)
            document = await asyncio.to_thread(send_and_wait, settings, request)
            candidates = document.get("candidates", [])
            print(f"# {user}@{thread}> {text}")
            print(f"# llm-bot> {candidates[-1]['text'] if candidates else '(no candidate)'}")
            last = event.correlation_id
        print(f"# why llm-bot answered that (`llm-bot explain {last}`):")
        url = stack.exports["DATABASE_URL"]
        for line in await explained(url, settings.agent_name, last):
            print(f"#   {line}".rstrip())
        print(NEXT_STEPS)
        print("# local stack ready; Ctrl-C stops it", flush=True)
        await worker.serve(stop)
