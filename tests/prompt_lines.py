"""How a reader of a model request sees its lines: every line of every message, and the lines a
Markdown reader takes as structure (outside fenced blocks), for tests that hostile text stays
data."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_FENCE = re.compile(r"(?P<run>~{3,}|`{3,})")


def message_lines(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every line of every message's text, as str.splitlines breaks them (U+2028 included)."""
    return [line for m in messages for line in str(m.get("content") or "").splitlines()]


def outside_fences(text: str) -> list[str]:
    """The lines of ``text`` outside fenced blocks. CommonMark: a fence opens on a line of three
    or more ``~`` or backticks indented at most three spaces, and closes on a line of at least as
    many of the same character and nothing else."""
    outside: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        found = _FENCE.match(stripped) if len(line) - len(stripped) <= 3 else None
        run = found.group("run") if found else None
        if fence is None:
            if run is None:
                outside.append(line)
            fence = run
        elif run and run[0] == fence[0] and len(run) >= len(fence) and stripped.rstrip() == run:
            fence = None
    return outside


def section_names(text: str) -> list[str]:
    """The ``## [Name]`` headings of a composed message, in order."""
    return [line for line in outside_fences(text) if line.startswith("## [")]


def section(text: str, name: str) -> str:
    """The body of ``## [name]`` in a composed message, up to the next section."""
    return text.split(f"## [{name}]\n", 1)[1].split("\n\n## [", 1)[0]
