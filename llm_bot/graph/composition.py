"""What the platform's annotations ask of the model, composed as BitBrat's llm-bot composes it.

BitBrat's routing rules put the *task* in ``prompt`` and ``instruction`` annotations ("Create
an appropriate answer to user alice's latest message.") and the *user's words* in
``message.text``; the bot's identity comes in ``personality`` annotations, context packs of
earlier stages in ``context`` annotations. The model gets:

- the system message: our system prompt, then ``## [Assistant Identity]`` with the
  personalities (at most 3, by ``score``, each cut to 4,000 characters): written out
  (``payload.text``) or named (``payload.name`` or ``value``), a name standing for the text of
  its highest active version in the personality store (:mod:`llm_bot.memory.personalities`);
- memory's messages (notes, memories, recalled messages, the thread's window), as before;
- one user message, in BitBrat's section order: ``## [Requesting User]`` (handle, user id,
  display name, roles), ``## [Contexts]`` (the packs), ``## [Task]`` (the prompt and instruction
  texts, by ``createdAt`` then ``id``, one ``- `` line each) and ``## [Input]`` (the user's
  words: ``message.text``, else the task's text). Empty sections are left out.

The user's words, a pack's content and the requesting user's names are not ours: none of their
lines may pass for a section of ours. The words and each pack are fenced
(:func:`llm_bot.text.fenced`, a fence longer than any run of ``~`` inside) whenever they could
be read as structure (a line break of any kind, or a start like a heading or a fence); a plain
line stays as the platform writes it. The requesting user's names and a pack's label are made
one line (:func:`llm_bot.text.one_line`).

History stores the user's words, never the instruction; an event with no task is SKIP even
when it has text, as on the platform.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.memory.personalities import Personalities
from llm_bot.text import fenced, has_line_break, one_line

logger = logging.getLogger(__name__)

TASK_KINDS = frozenset({"prompt", "instruction"})
MAX_PERSONALITIES = 3
MAX_PERSONALITY_CHARS = 4000
STRUCTURE_STARTS = ("#", "~", "`")  # a Markdown heading or fence
_QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`"))


@dataclass(frozen=True)
class IdentityPart:
    """One personality annotation: its text written out, or else the name to look up."""

    text: str = ""
    name: str = ""
    model: str | None = None


@dataclass(frozen=True)
class Identity:
    """The bot's identity for one event and the model its first personality asks for."""

    text: str = ""
    model: str | None = None


@dataclass(frozen=True)
class Request:
    """What one event asks: the task, the user's words, and the bot's personalities (if any)."""

    task: list[str]
    words: str
    personalities: tuple[IdentityPart, ...] = ()

    def user_message(self, event: InternalEventV2) -> str:
        sections = [
            ("Requesting User", "\n".join(_requesting_user(event))),
            ("Contexts", "\n\n".join(_contexts(event.annotations or []))),
            ("Task", "\n".join(f"- {line}" for line in self.task)),
            ("Input", _as_body(self.words)),
        ]
        return "\n\n".join(f"## [{name}]\n{body}" for name, body in sections if body)


def request_of(event: InternalEventV2) -> Request | None:
    """None when the event sets no task (the platform's SKIP)."""
    annotations = event.annotations or []
    task = [text for a in _ordered(annotations, TASK_KINDS) if (text := _text_of(a))]
    if not task:
        return None
    words = ((event.message.text if event.message else None) or "").strip()
    return Request(task, words or "\n\n".join(task), _personalities(annotations))


def system_message(system_prompt: str | None, identity: str) -> str | None:
    """Our system prompt and, when the event brings a personality, the assistant's identity."""
    parts = [system_prompt] if system_prompt else []
    if identity:
        parts.append(f"## [Assistant Identity]\n{identity}")
    return "\n\n".join(parts) or None


def unwrap_quoted(text: str) -> str:
    """The reply without quotes wrapping all of it, as the platform strips them (two passes)."""
    text = text.strip()
    for _ in range(2):
        for opening, closing in _QUOTE_PAIRS:
            if len(text) >= 2 and text.startswith(opening) and text.endswith(closing):
                text = text[1:-1].strip()
                break
        else:
            break
    return text


def _ordered(annotations: Iterable[AnnotationV1], kinds: frozenset[str]) -> list[AnnotationV1]:
    chosen = (a for a in annotations if a.kind in kinds)
    return sorted(chosen, key=lambda a: (a.created_at or "", a.id))


def _text_of(annotation: AnnotationV1) -> str:
    """``value`` when it is text, else ``payload.text``; stripped."""
    if isinstance(annotation.value, str) and annotation.value.strip():
        return annotation.value.strip()
    text = (annotation.payload or {}).get("text")
    return text.strip() if isinstance(text, str) else ""


def _personalities(annotations: list[AnnotationV1]) -> tuple[IdentityPart, ...]:
    """Personality annotations that write one out (``payload.text``) or name one
    (``payload.name``, else ``value``), by ``score``, ``createdAt``, id; the first 3."""
    parts = []
    chosen = [a for a in annotations if a.kind == "personality"]
    chosen.sort(key=lambda a: (_score(a), a.created_at or "", a.id))
    for annotation in chosen:
        payload = annotation.payload or {}
        text, name, model = payload.get("text"), payload.get("name"), payload.get("model")
        text = _sanitized(text) if isinstance(text, str) else ""
        if not (isinstance(name, str) and name.strip()):
            name = annotation.value if isinstance(annotation.value, str) else ""
        name = name.strip()
        if text or name:
            parts.append(IdentityPart(text, name, model if isinstance(model, str) else None))
    return tuple(parts[:MAX_PERSONALITIES])


async def resolve_identity(
    parts: Sequence[IdentityPart], lookup: Personalities | None, timeout_s: float = 5.0
) -> Identity:
    """The personalities' texts, named ones looked up (active, highest version); a name that
    is not found, cannot be looked up in ``timeout_s`` or has no store is left out. The first
    personality that names a model chooses the model of this event."""
    texts: list[str] = []
    model: str | None = None
    for part in parts:
        text, part_model = part.text, part.model
        if not text and lookup is not None:
            try:
                async with asyncio.timeout(timeout_s):
                    found = await lookup.active(part.name)
            except Exception:  # the personality is left out; the event goes on without it
                logger.warning("personality %r could not be looked up", part.name, exc_info=True)
                continue
            if found is None:
                logger.info("personality %r not found (no active version)", part.name)
                continue
            text, part_model = _sanitized(found.text), found.model
        if text:
            texts.append(text)
            model = model or part_model
    return Identity("\n\n".join(texts), model)


def _sanitized(text: str) -> str:
    return text.replace("\x00", "").strip()[:MAX_PERSONALITY_CHARS]


def _score(annotation: AnnotationV1) -> float:
    score = annotation.score
    return float(score) if isinstance(score, int | float) else float("inf")


def _requesting_user(event: InternalEventV2) -> list[str]:
    identity = event.identity
    user, external = identity.user, identity.external
    display = (user.display_name if user else None) or external.display_name
    roles = (user.roles if user and user.roles else None) or external.roles or []
    display = one_line(display) if display else None
    lines = [
        f"- Handle: {display}" if display else "",
        f"- User ID: {one_line(user.id if user else external.id)}",
        f"- Display Name: {display}" if display else "",
        f"- Roles: [{', '.join(one_line(role) for role in roles)}]" if roles else "",
    ]
    return [line for line in lines if line]


def _contexts(annotations: list[AnnotationV1]) -> list[str]:
    """Context packs: ``kind: context`` with ``payload.content``, by ``payload.priority``."""
    packs = [a for a in annotations if a.kind == "context" and (a.payload or {}).get("content")]
    packs.sort(key=lambda a: _priority((a.payload or {}).get("priority")))
    rendered = []
    for annotation in packs:
        payload = annotation.payload or {}
        name = one_line(str(annotation.label or payload.get("packId") or "")) or "Context Pack"
        content = payload["content"]
        body = content if isinstance(content, str) else json.dumps(content, indent=2)
        rendered.append(f"### {name}\n{_as_body(body)}")
    return rendered


def _priority(value: object) -> float:
    return float(value) if isinstance(value, int | float) and value else 3.0


def _as_body(text: str) -> str:
    """``text`` as a section's body: fenced when it could be read as structure, so its own
    headings and fences stay its own; a plain line as it is."""
    if has_line_break(text) or text.lstrip().startswith(STRUCTURE_STARTS):
        return fenced(text)
    return text
