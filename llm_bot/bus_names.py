"""Names on the bus: ``BUS_PREFIX`` before a topic's or a subscription's name, and the rule
Pub/Sub holds every such id to. One rule for the settings' names, checked at start, and for
the topics an event's routing slip names, checked at decode: either would otherwise be found
out only when Pub/Sub refuses a pull or a publish."""

from __future__ import annotations

import re

# A letter, then 2 to 254 of letters, digits and "-_.~+%", not starting with "goog"
# (cloud.google.com/pubsub/docs/admin, "Resource names"). A path ("projects/p/topics/t",
# another project's included) is none.
_PUBSUB_NAME = re.compile(r"(?!goog)[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")


def is_pubsub_name(name: str) -> bool:
    """Whether Pub/Sub accepts ``name`` as a topic's or a subscription's id."""
    return _PUBSUB_NAME.fullmatch(name) is not None


def prefixed(topic: str, prefix: str) -> str:
    """``topic`` with ``prefix`` in front unless it already starts with it."""
    if not prefix or topic.startswith(prefix):
        return topic
    return prefix + topic
