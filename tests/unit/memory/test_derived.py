"""A derived memory's metadata reads back as what was written; anything else (a model's
metadata, an import's, a malformed list of turns) reads as no derivation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from llm_bot.memory.derived import DerivedFrom, derived_from, derived_metadata


def test_what_consolidation_writes_reads_back_with_its_job() -> None:
    metadata = derived_metadata("dm:ada", "0-4", [1, 3], datetime(2026, 11, 9, tzinfo=UTC))
    assert derived_from(metadata) == DerivedFrom("dm:ada", "0-4", (1, 3))
    assert DerivedFrom("dm:ada", "0-4", (1, 3)).job == "consolidate:dm:ada:0-4"


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"topic": "food"},
        {"derivedFrom": "dm:ada", "window": "0-4"},
        {"derivedFrom": "dm:ada", "window": "0-4", "sourceTurns": "1,x"},
        {"derivedFrom": "dm:ada", "window": "0-4", "sourceTurns": ""},
        {"derivedFrom": 7, "window": "0-4", "sourceTurns": "1"},
    ],
)
def test_other_metadata_is_no_derivation(metadata: dict[str, Any]) -> None:
    assert derived_from(metadata) is None
