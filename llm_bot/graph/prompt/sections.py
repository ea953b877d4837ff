"""BitBrat's prompt sections, rendered as its assembler renders them for its llm-bot
(``src/common/prompt-assembly/assemble.ts`` with ``headingLevel: 2, showEmptySections: true``).

Each section is a ``## [Name]`` heading and its lines; an empty one says ``- None provided.``.
Constraints and task items carry BitBrat's priority marker, ``- (n) ``, 1 the most important,
and are listed by it (equal ones keep their order); contexts are listed by priority too, each
under ``## <name>``.

Text that is not ours stays data (:mod:`llm_bot.text`): a user's words, a context's content,
the requesting user's notes are fenced whenever they could be read as structure (a line break
of any kind, or a start like a heading or a fence), with a fence no line of theirs can close; a
plain line stays as the platform writes it. Names, handles, roles and a context's name and
subheader are made one line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from llm_bot.graph.prompt.annotations import DEFAULT_PRIORITY, NamedContext, RequestingUser
from llm_bot.text import fenced, has_line_break, one_line

NONE_PROVIDED = "- None provided."
STRUCTURE_STARTS = ("#", "~", "`")  # a Markdown heading or fence


@dataclass(frozen=True)
class Item:
    """A constraint or a task item and its priority (1 first)."""

    text: str
    priority: int = DEFAULT_PRIORITY


def section(name: str, lines: Sequence[str]) -> str:
    return "\n".join([f"## [{name}]", *(lines or [NONE_PROVIDED])])


def system_prompt_section(prompt: str | None) -> str:
    """Our system prompt as BitBrat shows its configured one: ``- Rules``, the prompt,
    ``- Sources: config``."""
    return section(
        "System Prompt", ["- Rules", f"- {prompt}", "- Sources: config"] if prompt else []
    )


def identity_section(identity: str) -> str:
    return section("Assistant Identity", [f"- {identity}"] if identity else [])


def requesting_user_section(user: RequestingUser) -> str:
    lines = [
        f"- Handle: {one_line(user.handle)}" if user.handle else "",
        f"- User ID: {one_line(user.user_id)}" if user.user_id else "",
        f"- Display Name: {one_line(user.display_name)}" if user.display_name else "",
        f"- Roles: [{', '.join(one_line(r) for r in user.roles)}]" if user.roles else "",
        _labelled("- Notes:", user.notes) if user.notes else "",
    ]
    return section("Requesting User", [line for line in lines if line])


def contexts_section(contexts: Sequence[NamedContext]) -> str:
    blocks = []
    for context in sorted(contexts, key=lambda c: c.priority):
        lines = [as_body(one_line(context.subheader))] if context.subheader else []
        lines += [f"## {one_line(context.name)}", as_body(_content_text(context.content))]
        blocks.append("\n".join(lines))
    return section("Contexts", ["\n\n".join(blocks)] if blocks else [])


def constraints_section(items: Sequence[Item]) -> str:
    return section("Constraints", _marked(items))


def task_section(items: Sequence[Item]) -> str:
    return section("Task", _marked(items))


def input_section(words: str) -> str:
    return f"## [Input]\n{as_body(words)}"


def as_body(text: str) -> str:
    """``text`` as a section's body: fenced when it could be read as structure, so its own
    headings and fences stay its own; a plain line as it is."""
    if has_line_break(text) or text.lstrip().startswith(STRUCTURE_STARTS):
        return fenced(text)
    return text


def _marked(items: Sequence[Item]) -> list[str]:
    return [f"- ({item.priority}) {item.text}" for item in sorted(items, key=lambda i: i.priority)]


def _labelled(label: str, text: str) -> str:
    """``label text`` on one line when ``text`` is a plain line, else the label and the fence."""
    body = as_body(text)
    return f"{label} {body}" if body == text else f"{label}\n{body}"


def _content_text(content: object) -> str:
    """Text as it is; anything else as indented JSON, as ``JSON.stringify(x, null, 2)``."""
    if isinstance(content, str):
        return content
    return json.dumps(content, indent=2, ensure_ascii=False)
