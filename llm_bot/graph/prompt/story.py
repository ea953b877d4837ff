"""BitBrat's story engine as its llm-bot reads it (``processor.ts``, ``adventure-tools.ts``).

The story-engine stage attaches the user's story as an annotation labelled
``adventure_context`` (its ``value`` a JSON document: ``storyId``, ``theme``, ``setting``,
``currentScene``, ``availableChoices``, ``worldStateSummary``); it is shown as four contexts
(Adventure Meta, Current Scene, Available Choices, World State), never as task. A routing slip
with a step ``adventure`` makes the bot the story's Narrator: the Narrator instruction joins the
task, after the platform's own task annotations.
"""

from __future__ import annotations

from collections.abc import Iterable

from llm_bot.events.limits import InvalidEvent, check_document, parse_json
from llm_bot.events.models import AnnotationV1, InternalEventV2
from llm_bot.graph.prompt.annotations import ADVENTURE_LABEL, NamedContext, js_truthy

ADVENTURE_STEP = "adventure"
# BitBrat's NARRATOR_SYSTEM_PROMPT, trimmed as its llm-bot trims an instruction.
NARRATOR = """You are the Narrator for a "Choose Your Own Adventure" story.
Your goal is to provide immersive, engaging storytelling based on the user's theme and actions.

Rules:
1. Stay in character as the Narrator.
2. For each scene, provide a descriptive narrative (1-2 paragraphs).
3. Always offer 3-4 distinct, numbered choices at the end of each scene.
4. If the user provides a free-text action, incorporate it into the narrative.
5. Keep track of the world state (inventory, health, location) and reflect it in the story.
6. Enforce consequences for user actions.
7. Use the tools provided to persist the story state.
8. If the theme is not specified, default to "Dark Fantasy"."""


def narrates(event: InternalEventV2) -> bool:
    """Whether any step of the slip is the story's (``adventure``)."""
    return any(step.id == ADVENTURE_STEP for step in event.routing.slip)


def story_contexts(annotations: Iterable[AnnotationV1]) -> list[NamedContext]:
    """The first ``adventure_context`` annotation as contexts; a value that is not a JSON
    object (or text holding one) gives none."""
    story = next((a for a in annotations if a.label == ADVENTURE_LABEL), None)
    data = _document(story.value) if story is not None else None
    if not isinstance(data, dict):
        return []
    contexts = []
    if js_truthy(data.get("storyId")):
        meta = {key: data[key] for key in ("storyId", "theme", "setting") if key in data}
        contexts.append(NamedContext("Adventure Meta", meta, 3))
    if js_truthy(data.get("currentScene")):
        contexts.append(NamedContext("Current Scene", data["currentScene"], 2))
    choices = data.get("availableChoices")
    if isinstance(choices, list | str) and choices:
        contexts.append(NamedContext("Available Choices", choices, 3))
    if js_truthy(data.get("worldStateSummary")):
        contexts.append(NamedContext("World State", _world(data["worldStateSummary"]), 3))
    return contexts


def _document(value: object) -> object:
    return _parsed(value) if isinstance(value, str) else value


def _world(summary: object) -> object:
    """The world state: JSON text (the story engine sends it so) as the document it holds."""
    if isinstance(summary, str) and summary.startswith(("{", "[")):
        parsed = _parsed(summary)
        return summary if parsed is None else parsed
    return summary


def _parsed(text: str) -> object:
    """The JSON document ``text`` holds, held to the rules of a whole event (finite numbers,
    bounded nesting, storable text); None when it breaks one or is no JSON."""
    try:
        document = parse_json(text)
        check_document(document)
    except (ValueError, RecursionError, InvalidEvent):
        return None
    return document
