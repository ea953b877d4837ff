"""The console's browser tests: Debian's chromium (``/usr/bin/chromium``) driven by Playwright,
one browser per module, and ``llm-bot console`` as a child process. Without the browser (or
Playwright) every browser test is skipped with one reason; ``make test`` installs chromium
where it can (as root, with apt-get)."""

from __future__ import annotations

import asyncio
import http.client
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

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


class ConsoleProcess:
    """``llm-bot console`` with ``environment`` (setting aliases -> values), its log in a file."""

    def __init__(self, environment: Mapping[str, str], log_path: Path) -> None:
        self.environment = dict(environment)
        self.port = int(environment["LLM_BOT_CONSOLE_PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log: IO[Any] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> ConsoleProcess:
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "llm_bot.cli", "console"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.environment},
        )
        deadline = time.monotonic() + timeout_s
        while self.status("/") is None:
            if self._process.poll() is not None or time.monotonic() >= deadline:
                raise RuntimeError(f"console did not start; log:\n{self.log()}")
            time.sleep(0.1)
        return self

    def status(self, path: str) -> int | None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            connection.request("GET", path)
            return connection.getresponse().status
        except OSError:
            return None
        finally:
            connection.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=15)
        if self._log is not None:
            self._log.close()
