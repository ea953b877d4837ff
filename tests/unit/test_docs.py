"""The docs that have a length cap stay within it: a page past its cap says what is and what
was, and history lives in git. docs/performance.md states the current figures, each with the
command that reproduces it, in at most 300 lines."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAPS = {"docs/performance.md": 300}


@pytest.mark.parametrize(("page", "cap"), sorted(CAPS.items()))
def test_a_capped_page_stays_within_its_lines(page: str, cap: int) -> None:
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= cap, f"{page} has {len(lines)} lines, its cap is {cap}"
