"""The one place a user id becomes a storage namespace.

Every memory read or write goes through :func:`user_namespace`, so scoping to one user is a
property of the type, not of each query remembering a filter. LangGraph namespaces are joined
with ``.`` and may not contain one, so ``%`` and ``.`` in user ids are percent-encoded: two
different user ids can never share a namespace.
"""

from __future__ import annotations

MEMORIES = "memories"


def encode_label(user_id: str) -> str:
    if not user_id:
        raise ValueError("user id must not be empty")
    return user_id.replace("%", "%25").replace(".", "%2E")


def user_namespace(user_id: str) -> tuple[str, str]:
    return (MEMORIES, encode_label(user_id))


def namespace_text(namespace: tuple[str, ...]) -> str:
    """The namespace as LangGraph stores it in the ``prefix`` column."""
    return ".".join(namespace)
