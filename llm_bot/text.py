"""Text that can be stored and published: what Postgres and UTF-8 refuse.

JSON can carry a lone surrogate (``"\\ud800"``), which no UTF-8 encoder accepts, and NUL, which
Postgres text and jsonb refuse. An input holding either is refused at decode
(:mod:`llm_bot.events.limits`); a model's reply holding either is repaired (:func:`storable`),
since the reply is ours to deliver and one odd character must not cost the whole answer.
"""

from __future__ import annotations

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD."""
    return UNSTORABLE.sub(REPLACEMENT, text)
