"""The console's web application: Starlette routes rendered by Jinja2 templates, no script.

Every response carries a Content-Security-Policy that allows no script, frame or foreign
resource (``default-src 'none'``; the stylesheet and images from this origin only; forms post
here only; no page may frame it), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
no-referrer`` (a user id in a query must not leave in a Referer). A request no authenticator
accepts is answered 401 before any route runs, with ``WWW-Authenticate: Basic`` when a token
is configured, so a browser asks for it. A query string is then checked before any route runs
(:mod:`llm_bot.console.inputs`): one holding a value no statement should get (NUL, bytes that
are not UTF-8, an id longer than any) is answered 400. A page that shows a user's data records
the view (:mod:`llm_bot.db.console_views`) before it reads anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llm_bot.console import display
from llm_bot.console.auth import Authenticator, Operator, authenticated
from llm_bot.console.inputs import checked
from llm_bot.console.reads import MODES, try_recall, user_data, users_starting
from llm_bot.db.console_views import record_view
from llm_bot.db.hybrid import QUERY_MAX_CHARS
from llm_bot.explanation.reader import explanation_for
from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
from llm_bot.memory.store import MemoryStore

HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass(frozen=True)
class Console:
    """What the pages read through, and who may see them."""

    store: MemoryStore
    retriever: PostgresMemoryRetriever
    limits: ContextLimits
    agent: str
    authenticators: Sequence[Authenticator]
    clock: Callable[[], datetime]
    basic_realm: bool  # a token is configured: a 401 invites the browser to ask for it


def templates() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["shown"] = display.shown
    environment.globals["SHORT"] = display.SHORT
    environment.globals["CELL"] = display.CELL
    return environment


def console_app(console: Console) -> ASGIApp:
    app = Starlette(routes=pages(console))
    return secured(authorised(checked(app), console), SECURITY_HEADERS)


def pages(console: Console) -> list[BaseRoute]:
    """The console's routes, each page reading through ``console``: apart from
    :func:`console_app` so that a test walks every route the app serves."""
    environment = templates()

    def render(name: str, operator: Operator, **values: Any) -> HTMLResponse:
        html = environment.get_template(name).render(operator=operator.name, modes=MODES, **values)
        return HTMLResponse(html)

    async def viewed(request: Request, page: str) -> str:
        user_id = request.query_params.get("id", "")
        if user_id:
            operator: Operator = request.state.operator
            async with console.store.connection() as connection:
                await record_view(connection, user_id, operator.name, page, console.clock())
        return user_id

    async def find(request: Request) -> Response:
        prefix = request.query_params.get("q", "")
        found = await users_starting(console.store, prefix) if prefix else []
        return render("find.html", request.state.operator, prefix=prefix, found=found)

    async def user(request: Request) -> Response:
        user_id = await viewed(request, "user")
        if not user_id:
            return PlainTextResponse("which user? (?id=...)", status_code=400)
        data = await user_data(console.store, user_id, console.agent)
        return render("user.html", request.state.operator, user_id=user_id, data=data)

    async def recall_page(request: Request) -> Response:
        user_id = await viewed(request, "recall")
        if not user_id:
            return PlainTextResponse("which user? (?id=...)", status_code=400)
        query = request.query_params.get("q", "")[:QUERY_MAX_CHARS]
        thread = request.query_params.get("thread", "")
        private = request.query_params.get("scope", "dm") == "dm"
        trial = None
        if query:
            trial = await try_recall(
                console.store,
                console.retriever,
                console.limits,
                user_id,
                thread,
                query,
                private=private,
            )
        return render(
            "recall.html",
            request.state.operator,
            user_id=user_id,
            query=query,
            thread=thread,
            private=private,
            trial=trial,
        )

    async def event(request: Request) -> Response:
        user_id = await viewed(request, "event")
        correlation_id = request.query_params.get("correlation", "")
        if not user_id or not correlation_id:
            return PlainTextResponse("which event? (?id=USER&correlation=ID)", status_code=400)
        async with console.store.connection() as connection:
            explanation = await explanation_for(
                connection, correlation_id, user_id=user_id, agent=console.agent
            )
        return render(
            "event.html",
            request.state.operator,
            user_id=user_id,
            correlation_id=correlation_id,
            explanation=explanation,
        )

    return [
        Route("/", find),
        Route("/user", user),
        Route("/recall", recall_page),
        Route("/event", event),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def authorised(app: ASGIApp, console: Console) -> ASGIApp:
    """``app`` behind the authenticators: the operator on ``request.state``, or 401."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        operator = await authenticated(console.authenticators, Headers(scope=scope))
        if operator is None:
            challenge = {"www-authenticate": 'Basic realm="llm-bot console"'}
            response = PlainTextResponse(
                "401: credentials required (a bearer token, or IAP's signed header)",
                status_code=401,
                headers=challenge if console.basic_realm else None,
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["operator"] = operator
        await app(scope, receive, send)

    return guarded


def secured(app: ASGIApp, headers: Mapping[str, str]) -> ASGIApp:
    """``app`` with ``headers`` on every response, its own and the 401s."""
    raw = [(name.encode(), value.encode()) for name, value in headers.items()]

    async def with_headers(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *raw]
            await send(message)

        await app(scope, receive, sending)

    return with_headers
