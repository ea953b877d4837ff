"""The console's browser tests: Debian's chromium (``/usr/bin/chromium``) driven by Playwright,
one browser per module. Without the browser (or Playwright) every browser test is skipped with
one reason; ``make test`` installs chromium where it can (as root, with apt-get)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

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
