"""Whether an event can be processed and published at all, decided when it is decoded.

Each rule names an input that would otherwise fail only after the model was paid for, with an
error no retry can cure, so the event would come back again and again. Such an event is
dead-lettered at once, with the rule it broke as the reason:

- text that cannot be published or stored: a lone surrogate (``"\\ud800"``: not encodable as
  UTF-8) or NUL (Postgres text and jsonb refuse it), anywhere in the document, keys included;
- nesting deeper than :data:`MAX_DEPTH` (the parser and the serializers recurse);
- an id longer than :data:`MAX_ID_BYTES`: correlation and step ids, the user and thread ids
  built from identity and channels, the event type. They become btree index keys (an entry
  holds at most ~2.7 kB), Pub/Sub attributes and ordering keys (1,024 bytes each);
- a topic name longer than Pub/Sub allows (255 characters);
- a routing slip longer than ``LLM_BOT_MAX_SLIP_STEPS``: every step pointing back at our topic
  would cost a model call.
"""

from __future__ import annotations

from typing import Any

from llm_bot.errors import PermanentError
from llm_bot.events.identity import thread_id_of, user_id_of
from llm_bot.events.models import InternalEventV2
from llm_bot.text import UNSTORABLE

MAX_DEPTH = 64
MAX_ID_BYTES = 512
MAX_TOPIC_CHARS = 255


class InvalidEvent(PermanentError):
    """The message is not an ``InternalEventV2`` we can process; permanent, never worth a retry."""


def check_document(document: Any) -> None:
    """Raise :class:`InvalidEvent` for text we cannot carry or nesting we will not walk."""
    stack: list[tuple[Any, str, int]] = [(document, "event", 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidEvent(f"{path}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, f"{path} key")
                stack.append((item, f"{path}.{key}", depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))


def check_event(event: InternalEventV2, max_slip_steps: int) -> None:
    """Raise :class:`InvalidEvent` for ids, topics or a slip we could never publish or store."""
    slip = event.routing.slip
    if len(slip) > max_slip_steps:
        raise InvalidEvent(
            f"routing.slip has {len(slip)} steps, over the limit of {max_slip_steps}"
        )
    ids = {
        "correlationId": event.correlation_id,
        "type": event.type,
        "user id (identity)": user_id_of(event),
        "thread id (egress connector and channel)": thread_id_of(event),
    }
    ids |= {f"routing.slip[{i}].id": step.id for i, step in enumerate(slip)}
    for name, value in ids.items():
        if len(value.encode()) > MAX_ID_BYTES:
            raise InvalidEvent(f"{name} is over {MAX_ID_BYTES} bytes")
    topics = {"egress.destination": event.egress.destination}
    topics |= {f"routing.slip[{i}].nextTopic": s.next_topic or "" for i, s in enumerate(slip)}
    for name, topic in topics.items():
        if len(topic) > MAX_TOPIC_CHARS:
            raise InvalidEvent(f"{name} is over {MAX_TOPIC_CHARS} characters")


def _check_text(text: str, path: str) -> None:
    found = UNSTORABLE.search(text)
    if found is not None:
        what = "NUL" if found.group() == "\x00" else "a lone surrogate"
        raise InvalidEvent(f"{path}: contains {what} at character {found.start()}")
