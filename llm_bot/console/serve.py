"""The console process: its read-only pool and embedder (the memory store's, role
``console``), the worker's retriever over them, the authenticators the settings name, and the
HTTP server (uvicorn) on ``LLM_BOT_CONSOLE_HOST``:``LLM_BOT_CONSOLE_PORT``, loopback unless
told otherwise, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import socket

from llm_bot.clock import utc_now
from llm_bot.console.auth import Authenticator, BearerToken, IapAssertion
from llm_bot.settings import Settings


class NoAuthenticator(ValueError):
    """Neither a token nor an IAP audience is set: every request would be refused."""


def authenticators_of(settings: Settings) -> list[Authenticator]:
    chosen: list[Authenticator] = []
    if settings.console_token is not None:
        chosen.append(BearerToken(settings.console_token.get_secret_value()))
    if settings.console_iap_audience:
        from google.auth.transport.requests import Request

        chosen.append(
            IapAssertion(settings.console_iap_audience, Request(), settings.console_iap_certs_url)
        )
    if not chosen:
        raise NoAuthenticator(
            "set LLM_BOT_CONSOLE_TOKEN (a bearer token) or LLM_BOT_CONSOLE_IAP_AUDIENCE (behind"
            " IAP): without either, the console would let nobody in"
        )
    return chosen


def listening(settings: Settings) -> socket.socket:
    """The console's socket, bound and listening before anything else starts, so an address in
    use or a host that does not resolve is an :class:`OSError` naming the address: one line and
    exit 1 from the command. Bound by uvicorn, the failure was uvicorn's own log lines and
    exit code 3."""
    host, port = settings.console_host, settings.console_port
    try:
        [(family, _, _, _, address), *_] = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        return socket.create_server(address, family=family)
    except OSError as error:
        raise OSError(f"the console cannot listen on {host}:{port}: {error.strerror}") from None


async def serve(settings: Settings, listener: socket.socket) -> None:
    """Serve the console on ``listener`` (:func:`listening`) until SIGTERM or Ctrl-C."""
    import uvicorn

    from llm_bot.console.app import Console, console_app
    from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
    from llm_bot.memory.wiring import open_memory_store

    authenticators = authenticators_of(settings)
    limits = ContextLimits.from_settings(settings)
    async with open_memory_store(settings, role="console") as store:
        console = Console(
            store=store,
            retriever=PostgresMemoryRetriever(store, limits, settings.agent_name, utc_now),
            limits=limits,
            agent=settings.agent_name,
            authenticators=authenticators,
            clock=utc_now,
            basic_realm=settings.console_token is not None,
        )
        config = uvicorn.Config(
            console_app(console),
            host=settings.console_host,
            port=settings.console_port,
            log_level=settings.log_level.lower(),
            server_header=False,
        )
        await uvicorn.Server(config).serve(sockets=[listener])
