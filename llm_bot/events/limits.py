"""Whether an event can be processed and published at all, decided when it is decoded.

Each rule names an input that would otherwise fail only after the model was paid for, with an
error no retry can cure, so the event would come back again and again. Such an event is
dead-lettered at once, with the rule it broke as the reason:

- text that cannot be published or stored: a lone surrogate (``"\\ud800"``: not encodable as
  UTF-8) or NUL (Postgres text and jsonb refuse it), anywhere in the document, keys included;
- a number JSON readers downstream refuse or cannot hold (:func:`parse_json`): ``NaN``,
  ``Infinity``, ``-Infinity`` (Python's parser takes them, JSON has none, and republished they
  make the output invalid JSON), and numbers beyond a 64-bit float (``1e400``, which Python
  reads as infinity and JavaScript too; an integer of 5,000 digits, which Python refuses to
  convert at all);
- nesting deeper than :data:`MAX_DEPTH` (the parser and the serializers recurse);
- an id longer than :data:`MAX_ID_BYTES`: correlation and step ids, the user and thread ids
  built from identity and channels, the event type. They become btree index keys (an entry
  holds at most ~2.7 kB), Pub/Sub attributes and ordering keys (1,024 bytes each);
- a topic name longer than Pub/Sub allows (255 characters);
- a routing slip longer than ``LLM_BOT_MAX_SLIP_STEPS``: every step pointing back at our topic
  would cost a model call.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from llm_bot.errors import DeadLetterError
from llm_bot.events.models import InternalEventV2
from llm_bot.text import UNSTORABLE

MAX_DEPTH = 64
MAX_ID_BYTES = 512
MAX_TOPIC_CHARS = 255
# Pub/Sub's limits on a message's attributes.
MAX_ATTRIBUTE_BYTES = 1024  # a value
MAX_ATTRIBUTE_KEY_BYTES = 256  # a key
MAX_ATTRIBUTES = 100
# Digits of the largest 64-bit float (1.8e308); an integer with more may not fit one.
FLOAT_DIGITS = 309
NUMBER_SHOWN_CHARS = 32


class InvalidEvent(DeadLetterError):
    """The message is not an ``InternalEventV2`` we can process: dead-lettered, never worth a
    retry."""

    kind = "invalid_event"


def parse_json(text: str) -> Any:
    """``json.loads`` that refuses, with :class:`InvalidEvent`, the numbers JSON readers
    downstream refuse or cannot hold; a syntax error is still ``json.JSONDecodeError``."""
    return json.loads(
        text, parse_constant=_refuse_constant, parse_float=_finite, parse_int=_integer
    )


def _refuse_constant(name: str) -> NoReturn:
    raise InvalidEvent(f"message body is not JSON: {name} is no JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        shown = text if len(text) <= NUMBER_SHOWN_CHARS else f"{text[:NUMBER_SHOWN_CHARS]}..."
        raise InvalidEvent(f"message body has a number beyond a 64-bit float: {shown}")
    return value


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > FLOAT_DIGITS:
        _finite(text)  # also keeps int() under Python's limit of digits it converts
    return int(text)


# Where a value sits in the document: its parent's place and its own key or index (None: the
# document itself). Spelt out (:func:`_path`) only for the error that names it: built for every
# value, each would copy its ancestors' keys, and a 100 kB key over a thousand values would be
# a hundred megabytes.
_Place = tuple["_Place", str | int] | None


def check_document(document: Any) -> None:
    """Raise :class:`InvalidEvent` for text we cannot carry or nesting we will not walk."""
    stack: list[tuple[Any, _Place, int]] = [(document, None, 1)]
    while stack:
        value, place, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidEvent(f"{_path(place)}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _check_text(value, place, "")
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, place, " key")
                stack.append((item, (place, key), depth + 1))
        elif isinstance(value, list):
            stack.extend((item, (place, i), depth + 1) for i, item in enumerate(value))


def _path(place: _Place) -> str:
    """``event.routing.slip[0].id``: the place's keys and indexes from the document down."""
    parts: list[str] = []
    while place is not None:
        place, part = place
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "event" + "".join(reversed(parts))


def check_event(
    event: InternalEventV2, max_slip_steps: int, *, user_id: str, thread_id: str
) -> None:
    """Raise :class:`InvalidEvent` for ids, topics or a slip we could never publish or store;
    ``user_id`` and ``thread_id`` are the event's (:mod:`llm_bot.events.inbound` derives them
    once)."""
    slip = event.routing.slip
    if len(slip) > max_slip_steps:
        raise InvalidEvent(
            f"routing.slip has {len(slip)} steps, over the limit of {max_slip_steps}"
        )
    ids = {
        "correlationId": event.correlation_id,
        "type": event.type,
        "user id (identity)": user_id,
        "thread id (egress connector and channel)": thread_id,
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


def _check_text(text: str, place: _Place, suffix: str) -> None:
    found = UNSTORABLE.search(text)
    if found is not None:
        what = "NUL" if found.group() == "\x00" else "a lone surrogate"
        raise InvalidEvent(f"{_path(place)}{suffix}: contains {what} at character {found.start()}")
