"""The console process: its read-only pool and embedder (the memory store's, role
``console``), the worker's retriever over them, the authenticators the settings name, and the
HTTP server (uvicorn) on ``LLM_BOT_CONSOLE_HOST``:``LLM_BOT_CONSOLE_PORT``, loopback unless
told otherwise, until SIGTERM or Ctrl-C."""

from __future__ import annotations

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


async def serve(settings: Settings) -> None:
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
        await uvicorn.Server(config).serve()
