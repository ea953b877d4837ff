"""The console's query strings, checked once before any route runs, so a new route's parameters
are checked too.

Every page sends its parameters to Postgres (a user id, an id's beginning, a correlation or
thread id, a recall query), and a user's page first records the view. A value Postgres' text
cannot hold failed the statement with ``psycopg.DataError``: a 500, sometimes after the view was
recorded. A query string is refused with 400 and the parameter named, before any statement,
when:

- a value is not UTF-8 text: a raw byte outside ASCII or an escape that does not decode
  strictly (``%FF``; ``%ED%A0%80``, the UTF-8 form of a lone surrogate, which UTF-8 forbids).
  Starlette decodes leniently, raw bytes as Latin-1 and such escapes as U+FFFD, so the page
  would look up a value other than the one sent;
- a value holds NUL, which no text column can (:data:`llm_bot.text.UNSTORABLE`);
- a value other than ``q`` is over :data:`~llm_bot.events.limits.MAX_ID_BYTES` in UTF-8, the
  bound of every id an event brings in, so a longer id names nobody and nothing. The other
  parameters are ids (and ``scope``); a parameter a new route adds is bounded alike;
- ``scope`` is neither of :data:`SCOPES`.

``q`` is text, not an id: on ``/`` an id's beginning (a longer one finds no user), on
``/recall`` a user's message, which the page cuts to
:data:`~llm_bot.db.hybrid.QUERY_MAX_CHARS` rather than refuses: the worker's searches read
only that beginning of a message (dense and full-text alike), so the trial of the cut message
is the one the worker runs for the whole, and the form shows the query as cut. ``q`` is never
stored.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from llm_bot.events.limits import MAX_ID_BYTES
from llm_bot.text import UNSTORABLE

SCOPES = ("dm", "shared")
NAME_SHOWN_CHARS = 40  # of a parameter's name, quoted back in the refusal


def refusal(query_string: bytes) -> str | None:
    """Why ``query_string`` is refused, naming the parameter, or ``None`` to serve it.

    It is read as Starlette reads it, but with every byte that is not UTF-8 text kept as a lone
    surrogate (``surrogateescape``) where Starlette would have made it another character."""
    pairs = parse_qsl(
        query_string.decode("ascii", "surrogateescape"),
        keep_blank_values=True,
        errors="surrogateescape",
    )
    for name, value in pairs:
        shown = ascii(name[:NAME_SHOWN_CHARS])
        found = UNSTORABLE.search(value)
        if found is not None and found.group() == "\x00":
            return f"{shown} holds NUL, which no stored text can"
        if found is not None:
            return (
                f"{shown} is not UTF-8 text (a raw byte over 0x7F, or escapes that are not UTF-8)"
            )
        if name != "q" and len(value.encode()) > MAX_ID_BYTES:
            return f"{shown} is over {MAX_ID_BYTES} bytes, longer than any id"
        if name == "scope" and value not in SCOPES:
            return f"{shown} is neither {' nor '.join(SCOPES)}"
    return None


def checked(app: ASGIApp) -> ASGIApp:
    """``app`` behind :func:`refusal`: a refused query string is answered 400 with the reason,
    and no route runs."""

    async def checking(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            reason = refusal(scope["query_string"])
            if reason is not None:
                response = PlainTextResponse(f"400: {reason}", status_code=400)
                await response(scope, receive, send)
                return
        await app(scope, receive, send)

    return checking
