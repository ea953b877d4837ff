"""The import direction of architecture.yaml's ``packages.layers``, checked on every module:
a package imports from layers below its own only, so no cycle can form between packages."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llm_bot"


def layer_of() -> dict[str, int]:
    layers = yaml.safe_load((ROOT / "architecture.yaml").read_text())["packages"]["layers"]
    return {name: depth for depth, names in enumerate(layers) for name in names}


def imported_packages(path: Path) -> set[str]:
    """Top-level llm_bot packages a module imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("llm_bot.")}
    return found


def owner_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def test_every_package_has_a_layer() -> None:
    owners = {owner_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert owners - set(layer_of()) == set(), "add new packages to architecture.yaml's layers"


def test_imports_point_down_the_layers() -> None:
    depth = layer_of()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        owner = owner_of(path)
        if owner == "__init__":
            continue
        for target in imported_packages(path) - {owner}:
            if depth[target] <= depth[owner]:
                upward.append(f"{path.relative_to(ROOT)} imports llm_bot.{target}")
    assert upward == []
