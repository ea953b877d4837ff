"""Who the console lets in: a bearer token (or HTTP Basic with the token as the password), and
IAP's signed header verified by google-auth against keys read from a certs URL. Here the keys
are this test's own, a P-256 key served as IAP serves its set (JSON of key id to PEM) from a
local HTTP server: the verifier is the production one, given another URL."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from google.auth.transport.requests import Request

from llm_bot.console.auth import IAP_HEADER, BearerToken, IapAssertion, Operator

from .conftest import AUDIENCE, Keys, private_key_pem

pytestmark = pytest.mark.integration


@pytest.fixture
def iap(keys: Keys) -> IapAssertion:
    return IapAssertion(AUDIENCE, Request(), keys.url)


async def test_a_signed_iap_assertion_names_the_operator(iap: IapAssertion, keys: Keys) -> None:
    operator = await iap.authenticate({IAP_HEADER: keys.assertion()})
    assert operator == Operator("iap:ops@example.com")


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "/projects/123/global/backendServices/999"},
        {"iss": "https://accounts.google.com"},
        {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
        {"email": ""},
    ],
    ids=["another audience", "another issuer", "expired", "no email"],
)
async def test_an_assertion_not_for_this_console_opens_nothing(
    iap: IapAssertion, keys: Keys, claims: dict[str, Any]
) -> None:
    assert await iap.authenticate({IAP_HEADER: keys.assertion(**claims)}) is None


async def test_an_assertion_signed_by_another_key_opens_nothing(
    iap: IapAssertion, keys: Keys
) -> None:
    forged = keys.assertion(private_key_pem())
    assert await iap.authenticate({IAP_HEADER: forged}) is None
    assert await iap.authenticate({IAP_HEADER: "not a jwt"}) is None
    assert await iap.authenticate({}) is None


async def test_the_key_set_is_read_once_for_many_requests(keys: Keys) -> None:
    verifier = IapAssertion(AUDIENCE, Request(), keys.url)
    before = keys.reads
    for _ in range(3):
        assert await verifier.authenticate({IAP_HEADER: keys.assertion()}) is not None
    assert keys.reads == before + 1


@pytest.mark.parametrize("answer", ["<html>a proxy's page</html>", "{}", '{"k1": 1}'])
async def test_an_answer_that_is_no_key_set_is_not_kept(keys: Keys, answer: str) -> None:
    """Kept, it refused every assertion for CERTS_TTL_S after the key set was served again."""
    verifier = IapAssertion(AUDIENCE, Request(), keys.url)
    keys.instead = answer
    try:
        assert await verifier.authenticate({IAP_HEADER: keys.assertion()}) is None
    finally:
        keys.instead = None
    assert await verifier.authenticate({IAP_HEADER: keys.assertion()}) is not None


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("authorization", "operator"),
    [
        ("Bearer s3cret", Operator("token")),
        ("bearer s3cret", Operator("token")),
        (basic("ada", "s3cret"), Operator("token:ada")),
        ("Bearer s3cre", None),
        ("Bearer s3cret2", None),
        (basic("ada", "wrong"), None),
        (basic("a\x00da", "s3cret"), None),  # the audit cannot store the name: a 500 on record
        ("Basic !!!", None),
        ("s3cret", None),
        ("", None),
    ],
)
async def test_the_bearer_token_opens_the_console_and_nothing_else_does(
    authorization: str, operator: Operator | None
) -> None:
    token = BearerToken("s3cret")
    assert await token.authenticate({"authorization": authorization}) == operator


async def test_a_token_outside_ascii_opens_the_console_as_bearer_as_it_does_as_basic() -> None:
    """A header's value arrives decoded as Latin-1 (ASGI's rule), and a client sends the token
    in UTF-8: compared as text, the Bearer form never matched while Basic (UTF-8 inside its
    base64) did."""
    token = BearerToken("t\u00f6k\u00e9n")
    as_received = "t\u00f6k\u00e9n".encode().decode("latin-1")
    assert await token.authenticate({"authorization": f"Bearer {as_received}"}) == Operator("token")
    assert await token.authenticate({"authorization": basic("ada", "t\u00f6k\u00e9n")}) == (
        Operator("token:ada")
    )
    assert await token.authenticate({"authorization": "Bearer t\u00f6k\u00e9n"}) is None
