"""What the platform's annotations ask of the model, composed as BitBrat's llm-bot composes it.

BitBrat's routing rules put the *task* in ``prompt`` and ``instruction`` annotations ("Create
an appropriate answer to user alice's latest message.") and the *user's words* in
``message.text``; the bot's identity comes in ``personality`` annotations, context packs and the
user's story from earlier stages (:mod:`llm_bot.graph.prompt.annotations`,
:mod:`llm_bot.graph.prompt.story`). The model gets, in BitBrat's sections
(:mod:`llm_bot.graph.prompt.sections`):

- the system message: ``## [System Prompt]`` (ours) and ``## [Assistant Identity]``, the
  personalities (``PERSONALITY_MAX_ANNOTATIONS``, 3, by ``score``, then ``createdAt``, then id,
  each cut to ``PERSONALITY_MAX_CHARS``, 4,000): written out (``payload.text``) or named
  (``payload.name`` or ``value``), a name standing for the text of its highest active version
  in the personality store (:mod:`llm_bot.db.personalities`); none when
  ``PERSONALITY_ENABLED`` is false;
- memory's messages (notes, memories, recalled messages, the thread's window) in place of
  BitBrat's ``## [Conversation State / History]`` section (:mod:`llm_bot.memory.context`);
- one user message: ``## [Requesting User]`` (handle, user id, display name, roles, notes),
  ``## [Contexts]`` (the story's parts and context packs, by priority), ``## [Constraints]``
  (the caller's guidance at priority 2, then every personality line that starts with "Do not",
  "Never", "Always", "Must", "Should", "Format" or "Output", at 3), ``## [Task]`` (the caller's
  task lines at 2, then the task annotations by ``createdAt`` as a time, then id, joined as one
  item at 3; the Narrator instruction last when the slip has a step ``adventure``) and
  ``## [Input]`` (``message.text``, else the task's text).

History stores the user's words, never the instruction; an event with no task is SKIP even
when it has text, as on the platform.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llm_bot.db.personalities import Personalities
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.graph.prompt.annotations import by_time, context_packs, requesting_user, task_texts
from llm_bot.graph.prompt.sections import (
    Item,
    constraints_section,
    contexts_section,
    identity_section,
    input_section,
    requesting_user_section,
    system_prompt_section,
    task_section,
)
from llm_bot.graph.prompt.story import NARRATOR, narrates, story_contexts
from llm_bot.settings import Settings

logger = logging.getLogger(__name__)

# BitBrat's constraint heuristic: a personality line (trimmed) starting so, in any case.
CONSTRAINT_LINE = re.compile(r"(?:Do not|Never|Always|Must|Should|Format|Output)", re.IGNORECASE)
GUIDANCE_PRIORITY = 2  # the caller's constraints and task lines (BitBrat's behaviour profile)
PERSONALITY_PRIORITY = 3
TASK_PRIORITY = 3
_QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`"))


@dataclass(frozen=True)
class PromptOptions:
    """BitBrat's personality switches: ``PERSONALITY_ENABLED``, ``PERSONALITY_MAX_ANNOTATIONS``
    and ``PERSONALITY_MAX_CHARS`` (0: no cut)."""

    personalities: bool
    max_personalities: int
    max_personality_chars: int


def prompt_options(settings: Settings) -> PromptOptions:
    return PromptOptions(
        settings.personality_enabled,
        settings.personality_max_annotations,
        settings.personality_max_chars,
    )


@dataclass(frozen=True)
class IdentityPart:
    """One personality annotation: its text written out, or else the name to look up, and
    the length a looked-up text is cut to (0: no cut)."""

    text: str = ""
    name: str = ""
    model: str | None = None
    max_chars: int = 0


@dataclass(frozen=True)
class Identity:
    """The bot's identity for one event, the model its first personality asks for, and the
    lines of its personalities that are constraints."""

    text: str = ""
    model: str | None = None
    constraints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """What one event asks: the task, the user's words, and the bot's personalities (if any)."""

    task: list[str]
    words: str
    personalities: tuple[IdentityPart, ...] = ()

    def user_message(
        self,
        event: InternalEventV2,
        identity: Identity | None = None,
        *,
        constraints: Sequence[str] = (),
        task_lines: Sequence[str] = (),
    ) -> str:
        """The user message; ``constraints`` and ``task_lines`` (guidance of the caller's,
        e.g. a behaviour profile) are listed at priority 2, before the personalities'
        constraints and the platform's task at 3."""
        parts = self.sections(event, identity, constraints=constraints, task_lines=task_lines)
        return join_sections(parts)

    def sections(
        self,
        event: InternalEventV2,
        identity: Identity | None = None,
        *,
        constraints: Sequence[str] = (),
        task_lines: Sequence[str] = (),
    ) -> list[Rendered]:
        """The user message's sections, each with what it was made from, in order (the
        message is :func:`join_sections` of them; an explanation cites them one by one)."""
        annotations = event.annotations or []
        personal = identity.constraints if identity else ()
        contexts = [*story_contexts(annotations), *context_packs(annotations)]
        return [
            Rendered("Requesting User", "event", requesting_user_section(requesting_user(event))),
            Rendered(
                "Contexts",
                "story and context packs",
                contexts_section(contexts),
                tuple(context.name for context in contexts),
            ),
            Rendered(
                "Constraints",
                "behaviour profile and personalities",
                constraints_section(
                    [
                        *(Item(text, PERSONALITY_PRIORITY) for text in personal),
                        *(Item(text, GUIDANCE_PRIORITY) for text in constraints),
                    ]
                ),
            ),
            Rendered(
                "Task",
                "behaviour profile and task annotations",
                task_section(
                    [
                        *(Item(text, GUIDANCE_PRIORITY) for text in task_lines),
                        Item("\n\n".join(self.task), TASK_PRIORITY),
                    ]
                ),
            ),
            Rendered("Input", "event", input_section(self.words), source=self.words),
        ]


@dataclass(frozen=True)
class Rendered:
    """A section as rendered: its name, where its content came from, its text, the names it
    cites and, for the user's words, the words themselves (what a reader compares)."""

    name: str
    origin: str
    text: str
    refs: tuple[str, ...] = ()
    source: str | None = None


def join_sections(sections: Sequence[Rendered]) -> str:
    return "\n\n".join(section.text for section in sections)


def request_of(event: InternalEventV2, options: PromptOptions) -> Request | None:
    """None when the event sets no task (the platform's SKIP)."""
    annotations = event.annotations or []
    task = task_texts(annotations) + ([NARRATOR] if narrates(event) else [])
    if not task:
        return None
    words = ((event.message.text if event.message else None) or "").strip()
    personalities = _personalities(annotations, options) if options.personalities else ()
    return Request(task, words or "\n\n".join(task), personalities)


def system_message(system_prompt: str | None, identity: str) -> str:
    """Our system prompt and the assistant's identity, as BitBrat's two system sections."""
    return f"{system_prompt_section(system_prompt)}\n\n{identity_section(identity)}"


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


def _personalities(
    annotations: Iterable[AnnotationV1], options: PromptOptions
) -> tuple[IdentityPart, ...]:
    """Personality annotations that write one out (``payload.text``) or name one
    (``payload.name``, else ``value``), by ``score``, ``createdAt``, id; the first few."""
    parts = []
    chosen = by_time(a for a in annotations if a.kind == "personality")
    chosen.sort(key=_score)  # stable: equal scores keep their time order
    cut = options.max_personality_chars
    for annotation in chosen:
        payload = annotation.payload or {}
        text, name, model = payload.get("text"), payload.get("name"), payload.get("model")
        text = _sanitized(text, cut) if isinstance(text, str) else ""
        if not (isinstance(name, str) and name.strip()):
            name = annotation.value if isinstance(annotation.value, str) else ""
        name = name.strip()
        if text or name:
            parts.append(IdentityPart(text, name, model if isinstance(model, str) else None, cut))
    return tuple(parts[: options.max_personalities])


async def resolve_identity(
    parts: Sequence[IdentityPart], lookup: Personalities | None, timeout_s: float
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
            text, part_model = _sanitized(found.text, part.max_chars), found.model
        if text:
            texts.append(text)
            model = model or part_model
    return Identity("\n\n".join(texts), model, _constraint_lines(texts))


def _constraint_lines(texts: Iterable[str]) -> tuple[str, ...]:
    """Lines of the personalities that BitBrat also lists as constraints (they stay in the
    identity too, as there)."""
    lines = (line.strip() for text in texts for line in text.split("\n"))
    return tuple(line for line in lines if CONSTRAINT_LINE.match(line))


def _sanitized(text: str, max_chars: int) -> str:
    text = text.replace("\x00", "").strip()
    return text[:max_chars] if max_chars > 0 else text


def _score(annotation: AnnotationV1) -> float:
    score = annotation.score
    return float(score) if isinstance(score, int | float) else float("inf")
