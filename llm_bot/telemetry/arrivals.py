"""The recent rate at which something arrives, for waits that are worth it only under load.

The group committer and the embeddings batcher both hold the first of a batch a little while
for company. Under load that pays (one transaction or request for many); for an event alone it
is latency for nothing. Both ask this estimate how many arrivals the recent rate promises
within their wait, and each decides at its own threshold (its wait costs differently).
"""

from __future__ import annotations

# Weight of the newest gap in the moving average of the gaps between arrivals: about the last
# ten arrivals count, so the estimate follows a change of load within a few events.
GAP_WEIGHT = 0.1


class ArrivalRate:
    """A moving average of the gaps between arrivals; until two arrived it is taken as high
    (a caller then waits, as it would without the estimate)."""

    def __init__(self) -> None:
        self._gap_s = 0.0
        self._last: float | None = None

    def note(self, now: float) -> None:
        if self._last is not None:
            self._gap_s += GAP_WEIGHT * (now - self._last - self._gap_s)
        self._last = now

    def expected_within(self, seconds: float) -> float:
        """How many arrivals the recent rate promises within ``seconds``."""
        return seconds / self._gap_s if self._gap_s > 0 else float("inf")
