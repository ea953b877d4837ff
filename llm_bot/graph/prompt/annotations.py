"""Reading the platform's annotations as BitBrat's llm-bot reads them (``processor.ts``).

Which annotations are the task, in which order, who the requesting user is and which context
packs an earlier stage attached. Values are JSON, so every reader takes what it expects and
treats anything else as absent, never as an error: a malformed annotation costs its own part
of the prompt, not the event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from llm_bot.events.models import AnnotationV1, InternalEventV2

TASK_KINDS = frozenset({"prompt", "instruction"})
ADVENTURE_LABEL = "adventure_context"
USER_CONTEXT_SOURCE, USER_CONTEXT_LABEL = "llm-bot.user-context", "user-context-v1"
DISPOSITION_SOURCE = "llm-bot.disposition"
CONTEXT_PACK_SOURCE = "context-pack"
STRUCTURED_USER_LINES = ("username:", "roles:", "description:")
DEFAULT_PRIORITY = 3


@dataclass(frozen=True)
class RequestingUser:
    """Who asks, as BitBrat's ``buildRequestingUser`` finds it; empty fields are left out."""

    user_id: str = ""
    handle: str = ""
    display_name: str = ""
    roles: tuple[str, ...] = ()
    notes: str = ""


@dataclass(frozen=True)
class NamedContext:
    """One block of ``## [Contexts]``: a context pack or a part of a story's state."""

    name: str
    content: object  # text as it is; anything else is shown as JSON
    priority: float = DEFAULT_PRIORITY
    subheader: str = ""


def js_truthy(value: object) -> bool:
    """Whether JavaScript would take ``value`` as true: ``{}`` and ``[]`` are, ``""``, 0 and
    null are not. The platform's checks are written that way."""
    if value is None or value is False or value == "":
        return False
    return not (isinstance(value, int | float) and value == 0)


def moment(created_at: str | None) -> float:
    """``createdAt`` as seconds since the epoch, compared as a time (``…01.500Z`` after
    ``…01Z``); missing or unreadable is 0, first, as ``Date.parse(x) || 0`` makes it."""
    if not created_at:
        return 0.0
    try:
        parsed = datetime.fromisoformat(created_at)
    except ValueError:
        return 0.0
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def by_time(annotations: Iterable[AnnotationV1]) -> list[AnnotationV1]:
    return sorted(annotations, key=lambda a: (moment(a.created_at), a.id))


def text_of(annotation: AnnotationV1) -> str:
    """``value`` when it is text, else ``payload.text``; stripped."""
    if isinstance(annotation.value, str) and annotation.value.strip():
        return annotation.value.strip()
    return _text((annotation.payload or {}).get("text"))


def task_text(annotation: AnnotationV1) -> str:
    """What a ``prompt``/``instruction`` annotation adds to the task: a user context its role
    prompts; a disposition (it goes to the requesting user's notes) and a story's state (it
    goes to the contexts) nothing."""
    if _is_user_context(annotation):
        prompts = _texts((annotation.payload or {}).get("rolePrompts"))
        return "\n\n".join(prompts)
    if annotation.source == DISPOSITION_SOURCE or annotation.label == ADVENTURE_LABEL:
        return ""
    return text_of(annotation)


def task_texts(annotations: Iterable[AnnotationV1]) -> list[str]:
    chosen = (a for a in annotations if a.kind in TASK_KINDS)
    return [text for a in by_time(chosen) if (text := task_text(a))]


def requesting_user(event: InternalEventV2) -> RequestingUser:
    annotations = event.annotations or []
    user_context = next((a for a in annotations if _is_user_context(a)), None)
    context = (user_context.payload or {}) if user_context else {}
    structured = _structured_lines(user_context)
    user, external = event.identity.user, event.identity.external
    raw = (event.message.raw_platform_payload if event.message else None) or {}
    user_display = user.display_name if user else None
    return RequestingUser(
        user_id=_first(user.id if user else None, external.id),
        handle=_first(
            context.get("username"),
            raw.get("username"),
            raw.get("user"),
            external.display_name,
            user_display,
        ),
        display_name=_first(user_display, external.display_name),
        roles=_role_line(structured)
        or _texts(context.get("roles"))
        or _texts(user.roles if user else None)
        or _texts(external.roles),
        notes="\n".join(_notes(event, structured, context)),
    )


def context_packs(annotations: Iterable[AnnotationV1]) -> list[NamedContext]:
    """Packs the context-pack stage attached (``kind: context``, ``source: context-pack``)."""
    packs = []
    for annotation in annotations:
        payload = annotation.payload or {}
        if annotation.kind != "context" or annotation.source != CONTEXT_PACK_SOURCE:
            continue
        if not js_truthy(payload.get("content")):
            continue
        name = annotation.label or payload.get("packId") or "Context Pack"
        subheader = payload.get("subheader")
        packs.append(
            NamedContext(
                name=str(name),
                content=payload["content"],
                priority=priority_of(payload.get("priority")),
                subheader=str(subheader) if js_truthy(subheader) else "",
            )
        )
    return packs


def priority_of(value: object) -> float:
    """A priority as given (1 first), else 3; the platform's ``priority || 3``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value:
        return DEFAULT_PRIORITY
    return float(value)


def _notes(event: InternalEventV2, structured: list[str], context: dict[str, object]) -> list[str]:
    """A user context's ``Username/Roles/Description`` lines (else its description), the
    disposition guidance, then ``identity.user.notes``."""
    disposition = next(
        (
            a
            for a in event.annotations or []
            if a.kind == "prompt" and a.source == DISPOSITION_SOURCE
        ),
        None,
    )
    user = event.identity.user
    parts = structured or [_text(context.get("description"))]
    parts += [text_of(disposition) if disposition else ""]
    parts += [_text((user.model_extra or {}).get("notes")) if user else ""]
    return [part for part in parts if part]


def _is_user_context(annotation: AnnotationV1) -> bool:
    return annotation.source == USER_CONTEXT_SOURCE or annotation.label == USER_CONTEXT_LABEL


def _structured_lines(annotation: AnnotationV1 | None) -> list[str]:
    if annotation is None:
        return []
    lines = (line.strip() for line in _text((annotation.payload or {}).get("text")).split("\n"))
    return [line for line in lines if line.lower().startswith(STRUCTURED_USER_LINES)]


def _role_line(structured: list[str]) -> tuple[str, ...]:
    line = next((line for line in structured if line.lower().startswith("roles:")), "")
    return _texts(line[len("roles:") :].split(",")) if line else ()


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _first(*values: object) -> str:
    return next((text for value in values if (text := _text(value))), "")


def _texts(values: object) -> tuple[str, ...]:
    """A list's entries as trimmed text, empty ones left out (``normalizeStringList``)."""
    if not isinstance(values, list):
        return ()
    texts = (_text(v if isinstance(v, str) else str(v if v is not None else "")) for v in values)
    return tuple(text for text in texts if text)
