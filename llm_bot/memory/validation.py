"""Rules a memory must meet before it is stored, whoever writes it (the model or an admin).

Token counts are approximated as characters / 4 (about right for English with OpenAI's
tokenizers, and cheap): ``MEMORY_MAX_TOKENS`` 2048 allows 8192 characters of content.
Metadata stays small and flat so it can be shown to the model and filtered in SQL. A key is
shown to the model in brackets and handed back by it to update or delete, so it is a plain word
(letters, digits, ``_`` and ``-``, at most 64): nothing in it can close the brackets or start a
line, and the keys the store makes up (:func:`new_key`) are such words.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Mapping
from typing import Any, TypeGuard

from llm_bot.memory.derived import DERIVED_METADATA_KEYS
from llm_bot.text import storable

CHARS_PER_TOKEN = 4
MAX_METADATA_KEYS = 5
MAX_METADATA_KEY_CHARS = 50
MAX_METADATA_VALUE_CHARS = 200
MAX_KEY_CHARS = 64
SAFE_KEY = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_KEY_CHARS}}}")
# Besides the row's own fields, what memory consolidation writes of a derived memory's origin,
# which an explanation shows as the job and its source turns: no model's metadata may pass for it.
RESERVED_METADATA_KEYS = (
    frozenset({"id", "userId", "createdAt", "updatedAt", "embedding"}) | DERIVED_METADATA_KEYS
)


class InvalidMemory(ValueError):
    """The memory breaks a rule; the message says which, for the model to correct itself."""


def approx_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def validate_memory(
    content: Any, metadata: Any, key: Any, max_tokens: int
) -> tuple[str, dict[str, str], str | None]:
    """Return (content, metadata, key) checked and normalised, or raise :class:`InvalidMemory`.
    A NUL or a lone surrogate (a model's JSON escapes decode to them) is made U+FFFD in the
    content and in the metadata's names and values: no stored text can hold one, and the write
    that met it would fail the memory, or the whole event."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidMemory("content must be a non-empty string")
    if approx_tokens(content) > max_tokens:
        raise InvalidMemory(
            f"content is about {approx_tokens(content)} tokens, over the limit of {max_tokens}"
        )
    checked_key = None if key is None else check_key(key)
    return storable(content.strip()), validate_metadata(metadata), checked_key


def is_safe_key(key: object) -> TypeGuard[str]:
    return isinstance(key, str) and SAFE_KEY.fullmatch(key) is not None


def new_key() -> str:
    """A key for a new memory: 64 random bits as 13 base32 letters and digits. Every memory's
    line in the prompt shows its key, so its length is paid on each line: a UUID's 36
    characters cost a fact of ~90 characters a quarter of its line (and ~24 tokens of a BPE
    tokenizer, whose hex runs split into short pieces). 64 bits keep a collision among one
    user's memories, the keys' only scope, out of reach: ~1 in 10^16 for a user's thousandth
    memory."""
    return key_of(secrets.token_bytes(8))


def key_of(bits: bytes) -> str:
    """``bits`` as a key: base32, lower case, unpadded (8 bytes: 13 characters)."""
    return base64.b32encode(bits).decode("ascii").rstrip("=").lower()


def check_key(key: object) -> str:
    """``key`` when it is a plain word of 1 to 64 letters, digits, ``_`` or ``-``, else
    :class:`InvalidMemory` naming the rule."""
    if not is_safe_key(key):
        raise InvalidMemory(
            f"key must be 1 to {MAX_KEY_CHARS} characters of letters, digits, '_' and '-'"
        )
    return str(key)


def validate_metadata(metadata: Any) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidMemory("metadata must be an object of string values")
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidMemory(
            f"metadata has {len(metadata)} keys, at most {MAX_METADATA_KEYS} allowed"
        )
    checked: dict[str, str] = {}
    for name, value in metadata.items():
        if name in RESERVED_METADATA_KEYS:
            raise InvalidMemory(f"metadata key {name!r} is reserved")
        if not isinstance(name, str) or not name or len(name) > MAX_METADATA_KEY_CHARS:
            raise InvalidMemory(f"metadata keys must be 1 to {MAX_METADATA_KEY_CHARS} characters")
        if not isinstance(value, str):
            raise InvalidMemory(f"metadata value of {name!r} must be a string (flat metadata only)")
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidMemory(
                f"metadata value of {name!r} is over {MAX_METADATA_VALUE_CHARS} characters"
            )
        checked[storable(name)] = storable(value)
    return checked
