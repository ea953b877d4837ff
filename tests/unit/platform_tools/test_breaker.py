"""The circuit breaker on a clock the test moves: opened for everyone by calls of different
users that get no answer in their full time, not by answers that are errors, nor by one user's
calls (which open that user's alone); fails at once while open; one probe when half-open."""

from __future__ import annotations

import asyncio

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from llm_bot.platform_tools.breaker import CircuitBreaker, Refused
from llm_bot.settings import load_settings

RESET_S = 120.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker("gateway", threshold=2, reset_timeout_s=RESET_S, clock=clock)


def fail(
    breaker: CircuitBreaker, error: Exception, user: str = "ada", *, full_time: bool = True
) -> None:
    with pytest.raises(type(error)), breaker.attempt(user, full_time=full_time):
        raise error


def fail_for_two_users(breaker: CircuitBreaker, error: Exception) -> None:
    fail(breaker, error, "ada")
    fail(breaker, error, "bob")


def succeed(breaker: CircuitBreaker, user: str = "ada") -> None:
    with breaker.attempt(user):
        pass


def refused(breaker: CircuitBreaker, user: str = "ada") -> float:
    with pytest.raises(Refused) as caught, breaker.attempt(user):
        pytest.fail("a refused call must not run")
    return caught.value.retry_in_s


def test_two_unanswered_calls_in_a_row_open_the_circuit_for_the_reset_timeout(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail(breaker, TimeoutError(), "ada")
    assert breaker.state == "closed"
    fail(breaker, MCPError(types.REQUEST_TIMEOUT, "Request timed out"), "bob")
    assert breaker.state == "open"
    clock.now += 100
    assert refused(breaker) == pytest.approx(RESET_S - 100)


def test_an_answer_between_failures_keeps_it_closed(breaker: CircuitBreaker) -> None:
    fail(breaker, TimeoutError(), "ada")
    succeed(breaker, "cy")
    fail(breaker, OSError("connection reset"), "bob")
    assert breaker.state == "closed"


def test_error_answers_from_the_server_never_open_it(breaker: CircuitBreaker) -> None:
    """A JSON-RPC error (the gateway's Forbidden) is an answer a user can cause at will."""
    for _ in range(5):
        fail(breaker, MCPError(types.INTERNAL_ERROR, "Forbidden"))
    assert breaker.state == "closed"


def test_after_the_timeout_one_probe_goes_and_its_answer_closes_the_circuit(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail_for_two_users(breaker, TimeoutError())
    clock.now += RESET_S
    with breaker.attempt():
        assert breaker.state == "half-open"
        assert refused(breaker) == 0.0  # the others fail at once while the probe is out
    assert breaker.state == "closed"
    succeed(breaker)
    fail(breaker, TimeoutError())
    assert breaker.state == "closed"  # counting starts again from zero


def test_a_failed_probe_opens_it_again_for_the_whole_timeout(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail_for_two_users(breaker, TimeoutError())
    clock.now += RESET_S + 5
    fail(breaker, TimeoutError())
    assert breaker.state == "open"
    assert refused(breaker) == pytest.approx(RESET_S)


def test_a_cancelled_probe_hands_the_probe_to_the_next_call(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail_for_two_users(breaker, TimeoutError())
    clock.now += RESET_S
    with pytest.raises(asyncio.CancelledError), breaker.attempt():
        raise asyncio.CancelledError
    succeed(breaker)
    assert breaker.state == "closed"


def test_bitbrats_defaults_come_from_the_settings(clock: FakeClock) -> None:
    from_settings = CircuitBreaker.from_settings("gateway", load_settings(), clock)
    for breaker in (from_settings, CircuitBreaker("gateway", clock=clock)):
        fail(breaker, TimeoutError())
        fail(breaker, TimeoutError())
        clock.now += 119.5
        assert refused(breaker) == pytest.approx(0.5)


def test_one_users_failures_open_their_circuit_alone(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    """One user can make calls time out at will: they lose the tools, the others keep them."""
    fail(breaker, TimeoutError(), "ada")
    fail(breaker, TimeoutError(), "ada")
    assert breaker.state == "closed"
    clock.now += 10
    assert refused(breaker, "ada") == pytest.approx(RESET_S - 10)
    succeed(breaker, "bob")
    clock.now += RESET_S
    succeed(breaker, "ada")  # their next call after the timeout tries again
    fail(breaker, TimeoutError(), "ada")
    succeed(breaker, "ada")  # counting starts again from zero


def test_a_timeout_within_a_limit_cut_short_counts_for_nothing(breaker: CircuitBreaker) -> None:
    for user in ("ada", "bob", "ada", "bob"):
        fail(breaker, TimeoutError(), user, full_time=False)
    assert breaker.state == "closed"
    succeed(breaker, "ada")
    succeed(breaker, "bob")


def test_calls_whose_connection_was_lost_count_for_nothing(breaker: CircuitBreaker) -> None:
    """Every call in flight fails with the connection, whoever's call lost it."""
    for user in ("ada", "bob", "cat", "ada"):
        fail(breaker, MCPError(types.CONNECTION_CLOSED, "Connection closed"), user)
    assert breaker.state == "closed"
    succeed(breaker, "bob")
