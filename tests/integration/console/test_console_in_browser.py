"""The operator console in a real browser, against a running worker: what the worker answered
is what the console shows.

A worker (a child process on the emulator, the scripted model over HTTP) answers Ada in a DM,
where she tells it a fact (a memory), then Bob and Ada in a shared channel, and Mallory, whose
message and memories are built to attack a page (a script, an image whose error runs code, a
``javascript:`` link, an RTL override, a megabyte of text). ``llm-bot console`` runs as a
child process logged in as a member of the read-only role (migration 0021), and chromium opens
it: the memory with its versions and visibility; "try a recall" with each candidate's scores
per mode and whether it is injected (in a DM; absent in a shared channel); each event's
explanation, the DM memory in the shared channel's only as a count; Mallory's page inert (no
dialog, no script ran, no element made of her text, the override shown, the text cut); 401
without credentials or with a wrong token or a forged IAP assertion, IAP's signed header let
in; every view in the audit, with who looked. After ``forget-user`` of Bob, Ada's explanation
shows his words as erased. Each page is saved as a screenshot under the test's folder.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import psycopg
import pytest
from psycopg import conninfo

from llm_bot.cli import main
from llm_bot.clock import utc_now
from llm_bot.memory.store import put_memory
from llm_bot_tools.devstack.worker_harness import CONSOLE, Bus, WorkerProcess
from llm_bot_tools.local.pubsub_emulator import free_loopback_port

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

from ...support.conversation import say, upsert
from .conftest import AUDIENCE, Keys, private_key_pem

pytestmark = pytest.mark.integration

TOKEN = "console-test-token"
FACT = "Ada drinks green tea every morning"
HOSTILE = (
    '<script>window.__owned = 1</script><img src=x onerror="window.__owned = 2">'
    ' [click](javascript:window.__owned=3) <a href="javascript:window.__owned=4">x</a>'
    " invoice\u202egpj.exe"
)
MEGABYTE = "lorem " * 175_000
EARLIER = "mallory's memory before it grew"


def console_login(url: str, role: str) -> str:
    """A login role of the console's read-only role, and the URL it connects with."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE llm_bot_console')
    return conninfo.make_conninfo(url, user=role)


def drop_login(url: str, role: str) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'DROP ROLE IF EXISTS "{role}"')


async def store_megabyte_memory(url: str) -> None:
    """A memory no worker would write (over MEMORY_MAX_TOKENS): the console shows whatever the
    table holds."""
    async with await psycopg.AsyncConnection.connect(url) as db:
        for text in (EARLIER, MEGABYTE):  # the first text becomes the memory's version 1
            await put_memory(db, "mallory", "huge", text, {}, "dm", None, utc_now())
            await db.commit()


class Watched:
    """A page whose dialogs are counted (an XSS would open one)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self._dismissed: list[asyncio.Future[None]] = []
        page.on("dialog", lambda dialog: self._dialog(dialog))

    def _dialog(self, dialog: object) -> None:
        self.dialogs.append(str(getattr(dialog, "message", "")))
        dismissed = asyncio.ensure_future(dialog.dismiss())  # type: ignore[attr-defined]
        self._dismissed.append(dismissed)


async def opened(page: Page, url: str, shot: Path) -> None:
    response = await page.goto(url)
    assert response is not None
    assert response.status == 200, await response.text()
    headers = response.headers
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    await page.screenshot(path=str(shot), full_page=False)


def q(value: str) -> str:
    return quote(value, safe="")


async def test_the_console_shows_what_the_worker_did_and_nothing_runs(
    bus: Bus,
    migrated_database_url: str,
    browser: Browser,
    keys: Keys,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker = WorkerProcess(bus.worker_environment(), tmp_path / "worker.log").start()
    try:
        await say(bus, "ada", f"{upsert(FACT)} remember this", thread="inbox", dm=True)
        in_dm = await say(bus, "ada", "what do I drink in the morning?", thread="inbox", dm=True)
        await say(bus, "bob", "bob's secret word is marmalade", thread="lobby", dm=False)
        in_lobby = await say(bus, "ada", "which drink do I like?", thread="lobby", dm=False)
        await say(bus, "mallory", f"{upsert(HOSTILE)} {HOSTILE}", thread="m", dm=True)
    finally:
        worker.kill()
    await store_megabyte_memory(migrated_database_url)

    role = f"console_{unique_name}"
    console = WorkerProcess(
        {
            **bus.worker_environment(),
            "DATABASE_URL": console_login(migrated_database_url, role),
            "LLM_BOT_CONSOLE_TOKEN": TOKEN,
            "LLM_BOT_CONSOLE_IAP_AUDIENCE": AUDIENCE,
            "LLM_BOT_CONSOLE_IAP_CERTS_URL": keys.url,
            "LLM_BOT_CONSOLE_PORT": str(free_loopback_port()),
        },
        tmp_path / "console.log",
        CONSOLE,
    ).start()
    context = await browser.new_context(
        extra_http_headers={"Authorization": f"Bearer {TOKEN}"},
        viewport={"width": 1280, "height": 900},
    )
    try:
        page = Watched(await context.new_page())
        base = f"http://127.0.0.1:{console.port}"

        await opened(page.page, f"{base}/?q=a", tmp_path / "find.png")
        assert await page.page.locator("ul.found a", has_text="ada").count() == 1

        await opened(page.page, f"{base}/user?id=ada", tmp_path / "user.png")
        memory = page.page.locator("tr.memory", has_text=FACT)
        assert await memory.locator("td.dm").count() == 1  # learned in a DM
        assert await page.page.locator("tr.turn", has_text="which drink do I like?").count() >= 1
        assert await page.page.locator("tr.event").count() == 3

        trial = f"{base}/recall?id=ada&q={q('what do I drink in the morning?')}"
        await opened(page.page, trial + "&scope=dm", tmp_path / "recall.png")
        row = page.page.locator("tr.candidate.memory", has_text=FACT)
        assert await row.locator("td.injected.yes").count() == 1
        cells = [text.strip() for text in await row.locator("td.num").all_inner_texts()]
        assert len(cells) == 4, cells  # the similarity, then one score per mode
        assert "\u2013" not in cells, cells  # every mode scored it
        await opened(page.page, trial + "&scope=shared", tmp_path / "recall-shared.png")
        assert await page.page.locator("tr.candidate.memory", has_text=FACT).count() == 0

        await opened(
            page.page, f"{base}/event?id=ada&correlation={q(in_dm)}", tmp_path / "event-dm.png"
        )
        memory_part = page.page.locator("tr.part", has_text=FACT).filter(has_text="similarity")
        assert await memory_part.count() == 1  # the memory, with its scores
        assert "memories, written" in await memory_part.inner_text()
        lobby_event = f"{base}/event?id=ada&correlation={q(in_lobby)}"
        await opened(page.page, lobby_event, tmp_path / "event-shared.png")
        body = await page.page.locator("main").inner_text()
        assert FACT not in body
        assert await page.page.locator("tr.left-out-row", has_text="another_scope").count() == 1
        assert await page.page.locator("tr.part", has_text="marmalade").count() >= 1

        await opened(page.page, f"{base}/user?id=mallory", tmp_path / "hostile.png")
        assert page.dialogs == []
        assert await page.page.evaluate("window.__owned === undefined")
        assert (
            await page.page.locator("main script, main img, main a[href^='javascript']").count()
            == 0
        )
        text = await page.page.locator("main").inner_text()
        assert "<script>window.__owned = 1</script>" in text  # shown as text
        assert "[U+202E]" in text
        assert "\u202e" not in text
        assert "more characters]" in text
        huge = page.page.locator("tr.memory", has_text="huge")
        assert await huge.locator("details li", has_text=EARLIER).count() == 1  # version 1
        assert len(await page.page.content()) < 200_000  # the megabyte is not on the page

        anonymous = await browser.new_context()
        # Through the browser's own HTTP stack: a navigation that meets a Basic challenge
        # headless ends in an error page instead of the answer.
        refused = await anonymous.request.get(f"{base}/user?id=ada")
        assert refused.status == 401
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert "default-src 'none'" in refused.headers["content-security-policy"]
        wrong = await anonymous.request.get(
            f"{base}/user?id=ada", headers={"Authorization": "Bearer not-the-token"}
        )
        assert wrong.status == 401
        # Behind IAP: its signed header opens the page and names the operator in the audit.
        signed = {"X-Goog-IAP-JWT-Assertion": keys.assertion(email="ops@example.com")}
        through_iap = await anonymous.request.get(f"{base}/user?id=ada", headers=signed)
        assert through_iap.status == 200
        forged = {"X-Goog-IAP-JWT-Assertion": keys.assertion(private_key_pem())}
        assert (await anonymous.request.get(f"{base}/user?id=ada", headers=forged)).status == 401
        await anonymous.close()

        with psycopg.connect(migrated_database_url) as db:
            views = set(db.execute("SELECT user_id, viewer, page FROM console_views").fetchall())
        assert views == {
            ("ada", "token", "user"),
            ("ada", "token", "recall"),
            ("ada", "token", "event"),
            ("mallory", "token", "user"),
            ("ada", "iap:ops@example.com", "user"),
        }

        monkeypatch.setenv("DATABASE_URL", migrated_database_url)
        assert await asyncio.to_thread(main, ["forget-user", "bob"]) == 0
        capsys.readouterr()
        await opened(page.page, lobby_event, tmp_path / "event-erased.png")
        assert await page.page.locator("tr.part", has_text="marmalade").count() == 0
        assert await page.page.locator("tr.part.erased").count() >= 1
    finally:
        await context.close()
        console.kill()
        drop_login(migrated_database_url, role)


def test_the_console_role_reads_and_cannot_write(fresh_database_url: str, unique_name: str) -> None:
    from llm_bot.db.migrate import migrate

    migrate(fresh_database_url)
    role = f"console_{unique_name}"
    url = console_login(fresh_database_url, role)
    try:
        with psycopg.connect(url, autocommit=True) as db:
            assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
            db.execute(
                "INSERT INTO console_views (user_id, viewed_at, viewer, page)"
                " VALUES ('ada', now(), 'token', 'user')"
            )
            for statement in (
                "DELETE FROM memories",
                "UPDATE agent_notes SET content = ''",
                "DELETE FROM console_views",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    db.execute(statement)
    finally:
        drop_login(fresh_database_url, role)
