"""Time as the wire format writes it: UTC, ISO-8601, milliseconds, ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_timestamp(moment: datetime) -> str:
    """``2026-08-14T12:00:00.000Z``, the form the platform's own services write."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
