"""The arrival-rate estimate that adaptive waits (group commit, embeddings batches) consult."""

from __future__ import annotations

from llm_bot.telemetry.arrivals import ArrivalRate


def test_unknown_rate_promises_company_then_follows_the_gaps() -> None:
    rate = ArrivalRate()
    assert rate.expected_within(0.02) == float("inf")  # unknown: wait, as before
    for second in range(50):
        rate.note(float(second))
    assert rate.expected_within(0.02) < 0.05  # one a second: nobody within 20 ms
    for step in range(50):
        rate.note(50 + step * 0.005)
    assert rate.expected_within(0.02) > 1  # one each 5 ms (the average still catching up)
