"""The console's tests: Debian's chromium (``/usr/bin/chromium``) driven by Playwright, one
browser per module (without the browser, or Playwright, every browser test is skipped with one
reason; ``make test`` installs chromium where it can, as root with apt-get), and a key set of
the test's own served as IAP serves its (JSON of key id to PEM), with the assertions it
signs: the console verifies them with the production code, given this URL."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.auth import crypt, jwt

from llm_bot.console.auth import IAP_ISSUER

if TYPE_CHECKING:
    from playwright.async_api import Browser

CHROMIUM = Path("/usr/bin/chromium")
NO_BROWSER = (
    f"browser tests skipped: no {CHROMIUM} (as root: apt-get install chromium; make test does)"
)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("browser tests skipped: Playwright is not installed (the dev extra has it)")
    if not await asyncio.to_thread(CHROMIUM.exists):
        pytest.skip(NO_BROWSER)
    async with async_playwright() as playwright:
        # Root (a container, CI) has no user namespace for chromium's sandbox.
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield launched
        await launched.close()


AUDIENCE = "/projects/123/global/backendServices/456"


def private_key_pem() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_pem(private_pem: bytes) -> str:
    key = serialization.load_pem_private_key(private_pem, password=None)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


class Keys:
    """A key set served over HTTP; counts how often it was read. ``instead``, when set, is
    served in its place (with 200)."""

    def __init__(self) -> None:
        self.private = {"k1": private_key_pem()}
        self.reads = 0
        self.instead: str | None = None
        keys = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                keys.reads += 1
                body = keys.instead or json.dumps(
                    {kid: public_pem(pem) for kid, pem in keys.private.items()}
                )
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/iap/verify/public_key"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def assertion(self, private_pem: bytes | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {
            "iss": IAP_ISSUER,
            "aud": AUDIENCE,
            "email": "ops@example.com",
            "sub": "accounts.google.com:1",
            "iat": now,
            "exp": now + 600,
            **claims,
        }
        signer = crypt.ES256Signer.from_string(private_pem or self.private["k1"], "k1")
        return jwt.encode(signer, payload).decode()


@pytest.fixture(scope="module")
def keys() -> Iterator[Keys]:
    served = Keys()
    yield served
    served.server.shutdown()
