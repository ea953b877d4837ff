"""Embeddings as query parameters, in pgvector's binary form.

Written as text (``[0.0123, ...]``) a 384-dimension vector cost ~0.3 ms of the event loop's
time, and an event sends four (memory search, recall, the history pair's two); packed, it is
~15 µs. The dumper leaves the type to the server (oid 0), which takes it from the statement's
``::vector`` cast, so connections need no type lookup.

The dumper is registered on each connection that writes or searches vectors
(:func:`register_vectors`: every pool of :mod:`llm_bot.db.pools` does it as it makes a
connection), not on psycopg's global adapters: importing this module changes no other
connection of the process, and a connection without it refuses a vector instead of sending it
in a form nobody chose.
"""

from __future__ import annotations

from typing import Any

from pgvector import Vector
from psycopg import BaseConnection
from psycopg.adapt import Dumper
from psycopg.pq import Format


class _BinaryVectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Vector) -> bytes:
        return bytes(obj.to_binary())


def register_vectors(connection: BaseConnection[Any]) -> None:
    """Send :func:`vector_param` values on ``connection`` in pgvector's binary form."""
    connection.adapters.register_dumper(Vector, _BinaryVectorDumper)


def vector_param(vector: list[float] | None) -> Vector | None:
    """``vector`` for a ``%s::vector`` placeholder (None stays NULL)."""
    return None if vector is None else Vector(vector)
