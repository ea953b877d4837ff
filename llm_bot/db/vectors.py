"""Embeddings as query parameters, in pgvector's binary form.

Written as text (``[0.0123, ...]``) a 384-dimension vector cost ~0.3 ms of the event loop's
time, and an event sends four (memory search, recall, the history pair's two); packed, it is
~15 µs. The dumper leaves the type to the server (oid 0), which takes it from the statement's
``::vector`` cast, so connections need no type lookup.
"""

from __future__ import annotations

import psycopg
from pgvector import Vector
from psycopg.adapt import Dumper
from psycopg.pq import Format


class _BinaryVectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Vector) -> bytes:
        return bytes(obj.to_binary())


psycopg.adapters.register_dumper(Vector, _BinaryVectorDumper)


def vector_param(vector: list[float] | None) -> Vector | None:
    """``vector`` for a ``%s::vector`` placeholder (None stays NULL)."""
    return None if vector is None else Vector(vector)
