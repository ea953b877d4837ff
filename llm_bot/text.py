"""Text that can be stored and published, and stored text quoted into a prompt as data.

JSON can carry a lone surrogate (``"\\ud800"``), which no UTF-8 encoder accepts, and NUL, which
Postgres text and jsonb refuse. An input holding either is refused at decode
(:mod:`llm_bot.events.limits`); a model's reply holding either is repaired (:func:`storable`),
since the reply is ours to deliver and one odd character must not cost the whole answer.

Text that users, neighbours or a steered model wrote reaches the model inside prompts we
compose, where a line of it could pass for a line of ours (a ``SYSTEM:`` line, a ``## [Task]``
heading, a ``[ada]`` speaker label). It goes in as data, in one of three shapes: a JSON string
on one line (:func:`quoted`), a short value with its line breaks made spaces (:func:`one_line`),
or a whole document inside a fence none of its lines can close (:func:`fenced`). The memory
context and the composed request both quote through here, so there is one rule for each shape.
What the command line prints for an operator's terminal goes through :func:`printable`.
"""

from __future__ import annotations

import json
import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"
# Line breaks of str.splitlines that json.dumps(ensure_ascii=False) leaves as they are (it
# escapes every character below U+0020 itself).
_UNESCAPED_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_TILDE_RUNS = re.compile("~+")
FENCE_CHAR = "~"
MIN_FENCE = 3


def storable(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD."""
    return UNSTORABLE.sub(REPLACEMENT, text)


def quoted(text: str) -> str:
    """``text`` as one JSON string on one line: quotes, backslashes and every line break of any
    kind escaped (non-ASCII letters stay readable), so it can neither end early nor start a
    line of its own."""
    encoded = json.dumps(text, ensure_ascii=False)
    for raw, escaped in _UNESCAPED_BREAKS.items():
        encoded = encoded.replace(raw, escaped)
    return encoded


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, line breaks included, made one space: for a
    short value written on a line of the prompt's own (a display name, a label)."""
    return " ".join(text.split())


def printable(text: str) -> str:
    """``text`` for a line of a terminal: every character that is not printable (controls,
    which a terminal takes for commands; line breaks; format characters such as a right-to-left
    override) written as its ``\\uXXXX`` escape, so a stored text or an event's id shown to an
    operator can neither command their terminal nor pass for lines of the output's own."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


def has_line_break(text: str) -> bool:
    """Whether ``text`` breaks a line anywhere, by any of the characters str.splitlines knows."""
    return bool(text) and text.splitlines() != [text]


def fenced(text: str, info: str = "text") -> str:
    """``text`` between fences of ``~`` longer than any run of ``~`` inside it. In Markdown
    (CommonMark) a fence closes only on a line of at least as many of its characters, so no
    line of ``text`` can close this one and let what follows be read as structure."""
    longest = max((len(run) for run in _TILDE_RUNS.findall(text)), default=0)
    fence = FENCE_CHAR * max(MIN_FENCE, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def capped(text: str, max_chars: int) -> str:
    """``text`` within ``max_chars``: else its start and a marker that says how much of it is
    shown, so a reader knows there was more (the marker may alone pass a tiny ``max_chars``)."""
    if len(text) <= max_chars:
        return text
    marker = "\n[...truncated: {} of " + f"{len(text)} characters shown]"
    keep = max(0, max_chars - len(marker.format(max_chars)))
    return text[:keep] + marker.format(keep)
