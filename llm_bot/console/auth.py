"""Who may open the console: pluggable authenticators, each asked in turn; a request none of
them accepts is answered 401.

- :class:`BearerToken`: ``Authorization: Bearer TOKEN``, or HTTP Basic with the token as the
  password (a browser asks for it by itself, and the user name given names the operator in the
  audit). Compared in constant time (:func:`hmac.compare_digest`), so the time an answer takes
  says nothing of how much of a guess was right.
- :class:`IapAssertion`: behind Google's Identity-Aware Proxy, the signed JWT IAP adds to every
  request it lets through (``X-Goog-IAP-JWT-Assertion``), verified with google-auth
  (:func:`google.oauth2.id_token.verify_token`): signed (ES256) by a key of IAP's published
  set, for this service's audience (a setting: ``/projects/NUMBER/global/backendServices/ID``
  or ``/projects/NUMBER/apps/PROJECT``), by IAP's issuer, unexpired. The key set comes from a
  URL through a google-auth transport; both are the verifier's to be given, so a test serves
  keys of its own over HTTP and production reads IAP's, with the same code. Verification
  blocks (the fetch), so it runs in a thread; the key set is kept for ``CERTS_TTL_S`` (an
  answer that is not one is not kept).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from google.auth import exceptions as auth_exceptions
from google.auth import transport
from google.oauth2 import id_token

from llm_bot.text import UNSTORABLE

IAP_HEADER = "x-goog-iap-jwt-assertion"
IAP_ISSUER = "https://cloud.google.com/iap"
IAP_CERTS_URL = "https://www.gstatic.com/iap/verify/public_key"
CERTS_TTL_S = 600.0


@dataclass(frozen=True)
class Operator:
    """Who is looking, as the audit records them."""

    name: str


class Authenticator(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Operator | None:
        """The operator these request headers prove, or None."""


class BearerToken:
    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the console's token must not be empty")
        self._token = token.encode()

    async def authenticate(self, headers: Mapping[str, str]) -> Operator | None:
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            # The header's bytes (ASGI decodes a value as Latin-1), which a client sends in UTF-8.
            offered = credentials.strip().encode("latin-1", errors="replace")
            return Operator("token") if hmac.compare_digest(offered, self._token) else None
        if scheme.lower() == "basic":
            user, password = _basic(credentials.strip())
            if self._matches(password):
                return Operator(f"token:{user}" if user else "token")
        return None

    def _matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self._token)


def _basic(credentials: str) -> tuple[str, str]:
    """(user, password) of HTTP Basic credentials; empty ones when they do not decode, or when
    the user holds NUL: it names the operator in the audit (``console_views``), which no text
    column can store, and every page would fail recording the view."""
    try:
        decoded = base64.b64decode(credentials, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    user, _, password = decoded.partition(":")
    if UNSTORABLE.search(user):
        return "", ""
    return user, password


class IapAssertion:
    def __init__(self, audience: str, request: transport.Request, certs_url: str) -> None:
        if not audience:
            raise ValueError("the IAP audience must not be empty")
        self._audience = audience
        self._request = CachedCerts(request, certs_url)
        self._certs_url = certs_url

    async def authenticate(self, headers: Mapping[str, str]) -> Operator | None:
        assertion = headers.get(IAP_HEADER)
        if not assertion:
            return None
        try:
            claims = await asyncio.to_thread(self._verify, assertion)
        except (ValueError, auth_exceptions.GoogleAuthError):
            return None
        if claims.get("iss") != IAP_ISSUER or not claims.get("email"):
            return None
        return Operator(f"iap:{claims['email']}")

    def _verify(self, assertion: str) -> Mapping[str, Any]:
        return id_token.verify_token(
            assertion, self._request, audience=self._audience, certs_url=self._certs_url
        )


class CachedCerts(transport.Request):
    """A google-auth transport that keeps the answer for ``certs_url`` ``CERTS_TTL_S``: the
    key set changes rarely and every page would otherwise fetch it."""

    def __init__(self, request: transport.Request, certs_url: str) -> None:
        self._request = request
        self._certs_url = certs_url
        self._lock = threading.Lock()
        self._kept: tuple[float, transport.Response] | None = None

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> transport.Response:
        if url != self._certs_url or method != "GET":
            response: transport.Response = self._request(
                url, method, body, headers, timeout, **kwargs
            )
            return response
        with self._lock:
            if self._kept is not None and time.monotonic() - self._kept[0] < CERTS_TTL_S:
                return self._kept[1]
            response = self._request(url, method, body, headers, timeout or 10.0, **kwargs)
            if response.status == 200 and _is_key_set(response.data):
                self._kept = (time.monotonic(), response)
            return response


def _is_key_set(data: bytes) -> bool:
    """Whether ``data`` is a key set as IAP serves it (JSON of key id to PEM): another answer
    with status 200 (a proxy's page, an empty set) kept would refuse every assertion for
    ``CERTS_TTL_S`` after the key set is served again."""
    try:
        keys = json.loads(data)
    except ValueError:  # not UTF-8, not JSON
        return False
    return isinstance(keys, dict) and bool(keys) and all(isinstance(v, str) for v in keys.values())


async def authenticated(
    authenticators: Sequence[Authenticator], headers: Mapping[str, str]
) -> Operator | None:
    """The first authenticator's operator that accepts the request."""
    for authenticator in authenticators:
        operator = await authenticator.authenticate(headers)
        if operator is not None:
            return operator
    return None
