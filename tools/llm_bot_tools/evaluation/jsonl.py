"""Reading the evaluation sets' JSONL files, one rule for all of them: every line checked
before any work, a bad one named by its file and line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def read_jsonl(path: Path, make: Callable[[dict[str, Any]], T], what: str = "") -> list[T]:
    """Each non-blank line of ``path`` made into a ``T`` by ``make``. A line that is not a JSON
    object, or that ``make`` refuses with ``ValueError``, raises ``ValueError`` naming the file
    and the line (and, given ``what``, what the line should have been); so does a file without
    a line, which no measure can use (no query has a mean to take, no derived item a second
    measurement to make). A byte-order mark before the first line is no part of it."""
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            items.append(make(row))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
        except ValueError as error:
            problem = f"not {what} ({error})" if what else str(error)
            raise ValueError(f"{path}:{number}: {problem}") from None
    if not items:
        raise ValueError(f"{path}: no JSON lines")
    return items
