"""No tracked text file holds a merge's conflict markers: a conflicted README or migration
passes every other check (markdown and SQL comments take anything), and ships."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("<<<<<<< ", ">>>>>>> ")  # a lone "=======" is also markdown's underline


def test_no_tracked_file_holds_conflict_markers() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    conflicted = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".gz"}:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        except UnicodeDecodeError:
            continue
        conflicted += [
            f"{name}:{number}"
            for number, line in enumerate(lines, start=1)
            if line.startswith(MARKERS)
        ]
    assert conflicted == []
