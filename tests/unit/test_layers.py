"""The import direction of architecture.yaml's ``packages`` layers, checked on every module:
a package imports from layers below its own only, so no cycle can form between packages. The
service (``llm_bot``) and the development tools (``llm_bot_tools``) each have their layers; the
development tools import the service, never the reverse. Within a layer's package, an
explanation's reader and its renderings are imported by the command line and the console
alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICE, DEV_TOOLS = "llm_bot", "llm_bot_tools"
# An explanation's reader and its renderings are the operator's: in the service only the
# command line and the console import them (and they each other), so the answering path, which
# builds the record (``llm_bot.explanation.record``), loads none of their reads.
EXPLANATION_READING = {f"{SERVICE}.explanation.{name}" for name in ("reader", "view", "render")}
READING_PACKAGES = {"cli", "console"}
# Each package: where it lives, and its layers' key in architecture.yaml.
PACKAGES = {
    SERVICE: (ROOT / "llm_bot", "layers"),
    DEV_TOOLS: (ROOT / "tools/llm_bot_tools", "dev_tools_layers"),
}


def layer_of(key: str) -> dict[str, int]:
    layers = yaml.safe_load((ROOT / "architecture.yaml").read_text())["packages"][key]
    return {name: depth for depth, names in enumerate(layers) for name in names}


def imported_modules(path: Path) -> set[str]:
    """Modules a module imports, at module level or inside functions; ``from a import b``
    counts as ``a`` and ``a.b`` (``b`` may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def imported_packages(path: Path, package: str) -> set[str]:
    """Top-level subpackages of ``package`` a module imports."""
    return {n.split(".")[1] for n in imported_modules(path) if n.startswith(f"{package}.")}


def owner_of(path: Path, root: Path) -> str:
    return path.relative_to(root).parts[0].removesuffix(".py")


@pytest.mark.parametrize("package", list(PACKAGES))
def test_every_package_has_a_layer(package: str) -> None:
    root, key = PACKAGES[package]
    owners = {owner_of(p, root) for p in root.rglob("*.py")} - {"__init__"}
    assert owners - set(layer_of(key)) == set(), "add new packages to architecture.yaml's layers"


@pytest.mark.parametrize("package", list(PACKAGES))
def test_imports_point_down_the_layers(package: str) -> None:
    root, key = PACKAGES[package]
    depth = layer_of(key)
    upward = []
    for path in sorted(root.rglob("*.py")):
        owner = owner_of(path, root)
        if owner == "__init__":
            continue
        for target in imported_packages(path, package) - {owner}:
            if depth[target] <= depth[owner]:
                upward.append(f"{path.relative_to(ROOT)} imports {package}.{target}")
    assert upward == []


def test_the_service_never_imports_the_dev_tools() -> None:
    """The image holds the service alone: an import of the development tools would fail there."""
    root, _ = PACKAGES[SERVICE]
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted(root.rglob("*.py"))
        for name in imported_modules(path)
        if name == DEV_TOOLS or name.startswith(f"{DEV_TOOLS}.")
    ]
    assert found == []


def test_only_the_command_line_and_the_console_read_explanations() -> None:
    root, _ = PACKAGES[SERVICE]
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if owner_of(path, root) in READING_PACKAGES or module in EXPLANATION_READING:
            continue
        found += [
            f"{path.relative_to(ROOT)} imports {name}"
            for name in sorted(imported_modules(path) & EXPLANATION_READING)
        ]
    assert found == []
