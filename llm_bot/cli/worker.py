"""``llm-bot run`` (the worker) and ``llm-bot check`` (is the running worker ready?).

``check`` asks the running worker's ``/readyz`` on ``PORT`` rather than probing the database
and subscription itself: readiness is the worker's own view (subscribed with a live stream,
database reachable from its pool), which a separate process cannot see. So it also fails when
no worker runs, which is what a container health command wants.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llm_bot.cli.failures import secrets_of
from llm_bot.cli.support import positive_seconds, require_database_url, utf8_text
from llm_bot.settings import Settings

if TYPE_CHECKING:  # telemetry is imported by the worker's start, not for parsing arguments
    from opentelemetry.sdk.trace import TracerProvider

EXIT_NOT_READY = 1


def command_run(args: argparse.Namespace, settings: Settings) -> int:
    """Pull, process and publish until SIGTERM/SIGINT/SIGHUP; exit 0 after a clean drain."""
    from llm_bot.telemetry.metrics import setup_metrics
    from llm_bot.worker import run_worker

    require_database_url(settings)
    tracing = start_telemetry(settings)
    try:
        # uvloop: the worker is CPU-bound in its event loop at load, and libuv's loop (with its
        # socket transports) takes ~20% off the CPU per event (docs/performance.md).
        with asyncio.Runner(loop_factory=event_loop_factory(settings.event_loop)) as runner:
            return runner.run(run_worker(settings, metrics_registry=setup_metrics()))
    finally:
        if tracing is not None:
            tracing.shutdown()  # flushes the spans still batched


def event_loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``LLM_BOT_EVENT_LOOP``: uvloop's loop where it is installed (every platform but
    Windows) unless asyncio's is asked for; None is asyncio's."""
    if kind != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def start_telemetry(settings: Settings) -> TracerProvider | None:
    """JSON logs on stdout (secrets masked), traces to OTLP when ``OTEL_*`` says so (the
    provider to flush at exit; None when traces go nowhere)."""
    from llm_bot.telemetry.logs import configure_json_logging
    from llm_bot.telemetry.traces import setup_tracing

    configure_json_logging(settings.log_level, settings.google_cloud_project, secrets_of(settings))
    return setup_tracing()


def command_check(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when the worker on ``--host``:``PORT`` says it is ready, else 1 with the reason."""
    connection = http.client.HTTPConnection(args.host, settings.port, timeout=args.timeout)
    try:
        connection.request("GET", "/readyz")
        response = connection.getresponse()
        status, body = response.status, response.read()
    except OSError as error:
        print(f"llm-bot: not ready: no worker answers on {args.host}:{settings.port} ({error})")
        return EXIT_NOT_READY
    finally:
        connection.close()
    detail = _detail(body)
    if status != 200:
        print(f"llm-bot: not ready: {detail}")
        return EXIT_NOT_READY
    print(f"ready: {detail}")
    return 0


def _detail(body: bytes) -> str:
    try:
        document: Any = json.loads(body)
        return str(document["detail"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:200]


def add_worker_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Register ``run`` and ``check`` on the ``llm-bot`` subcommand parser."""
    run = commands.add_parser("run", help="run the worker until SIGTERM")
    run.set_defaults(handler=command_run)

    check = commands.add_parser("check", help="exit 0 when the running worker is ready")
    check.add_argument(
        "--host", type=utf8_text, default="127.0.0.1", help="worker host (default: %(default)s)"
    )
    check.add_argument(
        "--timeout", type=positive_seconds, default=5.0, help="seconds to wait for an answer"
    )
    check.set_defaults(handler=command_check)
