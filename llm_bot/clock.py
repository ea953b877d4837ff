"""Time as the wire format writes it (UTC, ISO-8601, milliseconds, ``Z``), and the clocks a
component takes as a parameter, so its tests move time instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

# Seconds that only go forward (never set back by NTP): for durations and cool-downs.
Ticks = Callable[[], float]
monotonic: Ticks = time.monotonic


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_timestamp(moment: datetime) -> str:
    """``2026-08-14T12:00:00.000Z``, the form the platform's own services write."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
