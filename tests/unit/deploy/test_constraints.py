"""constraints.txt pins every runtime dependency of the image, so a rebuild of the same commit
installs the same packages (the Dockerfile installs the wheel under it).

It holds the runtime closure: what ``pip install llm-bot`` pulls without the ``local`` or
``dev`` extras, for Linux and the image's Python; then, under :data:`DEV_MARKER`, the few
tools of the ``dev`` extra whose version a test depends on (:data:`DEV_PINNED`: Playwright
speaks Debian's chromium's protocol), which the image never installs. Regenerate it from this
venv after changing dependencies with ``.venv/bin/python tests/unit/deploy/test_constraints.py
--write``.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
CONSTRAINTS = ROOT / "constraints.txt"
HEADER = """\
# Pins of llm-bot's runtime dependencies (no `local` or `dev` extra), for the image: the
# Dockerfile installs the wheel with `--constraint constraints.txt`, so a rebuild of a commit
# installs what was tested. Regenerate after changing dependencies:
#   .venv/bin/python tests/unit/deploy/test_constraints.py --write
# (tests/unit/deploy/test_constraints.py fails when a runtime dependency has no pin here).
"""
DEV_MARKER = "# The dev extra's tools whose version a test depends on (the image has none):\n"
DEV_PINNED = ("playwright",)
# The image: python:3.11 on Linux (Dockerfile).
IMAGE_ENVIRONMENT = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux"}


def runtime_requirements() -> dict[str, Requirement]:
    """Every distribution the bare wheel installs, by canonical name, with the (first)
    requirement that pulled it in."""
    found: dict[str, Requirement] = {}
    pending = [(Requirement("llm-bot"), frozenset[str]())]
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found and not requirement.extras:
            continue
        found.setdefault(name, requirement)
        for text in metadata.requires(requirement.name) or []:
            child = Requirement(text)
            wanted = extras | requirement.extras
            if child.marker is not None and not any(
                child.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": extra})
                for extra in (wanted or {""})
            ):
                continue
            pending.append((child, frozenset(child.extras)))
    del found["llm-bot"]
    return found


def pinned(section: str = "runtime") -> dict[str, str]:
    """The pins of the runtime closure, or of the ``dev`` section below :data:`DEV_MARKER`."""
    runtime, _, dev = CONSTRAINTS.read_text(encoding="utf-8").partition(DEV_MARKER)
    pins = {}
    for line in (runtime if section == "runtime" else dev).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
            assert match, f"not an exact pin: {line!r}"
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def test_every_runtime_dependency_is_pinned_within_its_range() -> None:
    pins, requirements = pinned(), runtime_requirements()
    missing = sorted(set(requirements) - set(pins))
    assert not missing, f"no pin in constraints.txt (regenerate it): {missing}"
    for name, requirement in requirements.items():
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])


def test_only_runtime_dependencies_are_pinned() -> None:
    """A pin of torch or pytest here would say the image carries them."""
    extra = sorted(set(pinned()) - set(runtime_requirements()))
    assert not extra, f"not a runtime dependency: {extra}"


def test_the_dev_pins_are_the_named_tools_at_their_installed_version() -> None:
    assert pinned("dev") == {name: metadata.version(name) for name in DEV_PINNED}


def render() -> str:
    lines = [f"{name}=={metadata.version(name)}" for name in sorted(runtime_requirements())]
    dev = [f"{name}=={metadata.version(name)}" for name in DEV_PINNED]
    return HEADER + "\n".join(lines) + "\n\n" + DEV_MARKER + "\n".join(dev) + "\n"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    CONSTRAINTS.write_text(render(), encoding="utf-8")
    print(f"wrote {CONSTRAINTS.relative_to(ROOT)}")
