"""The circuit breaker on a clock the test moves: opened by calls that get no answer, not by
answers that are errors; fails at once while open; one probe when half-open."""

from __future__ import annotations

import asyncio

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from llm_bot.settings import load_settings
from llm_bot.tools.breaker import CircuitBreaker, Refused

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


def fail(breaker: CircuitBreaker, error: Exception) -> None:
    with pytest.raises(type(error)), breaker.attempt():
        raise error


def succeed(breaker: CircuitBreaker) -> None:
    with breaker.attempt():
        pass


def refused(breaker: CircuitBreaker) -> float:
    with pytest.raises(Refused) as caught, breaker.attempt():
        pytest.fail("a refused call must not run")
    return caught.value.retry_in_s


def test_two_unanswered_calls_in_a_row_open_the_circuit_for_the_reset_timeout(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail(breaker, TimeoutError())
    assert breaker.state == "closed"
    fail(breaker, MCPError(types.CONNECTION_CLOSED, "Connection closed"))
    assert breaker.state == "open"
    clock.now += 100
    assert refused(breaker) == pytest.approx(RESET_S - 100)


def test_an_answer_between_failures_keeps_it_closed(breaker: CircuitBreaker) -> None:
    fail(breaker, TimeoutError())
    succeed(breaker)
    fail(breaker, OSError("connection reset"))
    assert breaker.state == "closed"


def test_error_answers_from_the_server_never_open_it(breaker: CircuitBreaker) -> None:
    """A JSON-RPC error (the gateway's Forbidden) is an answer a user can cause at will."""
    for _ in range(5):
        fail(breaker, MCPError(types.INTERNAL_ERROR, "Forbidden"))
    assert breaker.state == "closed"


def test_after_the_timeout_one_probe_goes_and_its_answer_closes_the_circuit(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail(breaker, TimeoutError())
    fail(breaker, TimeoutError())
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
    fail(breaker, TimeoutError())
    fail(breaker, TimeoutError())
    clock.now += RESET_S + 5
    fail(breaker, TimeoutError())
    assert breaker.state == "open"
    assert refused(breaker) == pytest.approx(RESET_S)


def test_a_cancelled_probe_hands_the_probe_to_the_next_call(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    fail(breaker, TimeoutError())
    fail(breaker, TimeoutError())
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
