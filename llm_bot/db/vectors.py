"""Embeddings as query parameters, in pgvector's binary form.

Written as text (``[0.0123, ...]``) a 384-dimension vector cost ~0.3 ms of the event loop's
time, and an event sends four (memory search, recall, the history pair's two); packed by
:mod:`struct` into pgvector's binary layout (big-endian dimensions, a reserved zero, then
float4s: ``vector_recv`` in pgvector's ``vector.c``), ~17 µs, half the time of building the
``pgvector`` package's numpy-backed ``Vector`` and packing that. The dumper leaves the type to
the server (oid 0), which takes it from the statement's ``::vector`` cast, so connections need
no type lookup.

The dumper is registered on each connection that writes or searches vectors
(:func:`register_vectors`: every pool of :mod:`llm_bot.db.pools` does it as it makes a
connection), not on psycopg's global adapters: importing this module changes no other
connection of the process, and a connection without it refuses a vector instead of sending it
in a form nobody chose.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from psycopg import BaseConnection
from psycopg.adapt import Dumper
from psycopg.pq import Format


class PackedVector:
    """An embedding in pgvector's binary form, packed once, for a ``::vector`` placeholder."""

    __slots__ = ("data",)

    def __init__(self, vector: Sequence[float]) -> None:
        self.data = struct.pack(f">HH{len(vector)}f", len(vector), 0, *vector)


class _BinaryVectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: PackedVector) -> bytes:
        return obj.data


def register_vectors(connection: BaseConnection[Any]) -> None:
    """Send :func:`vector_param` values on ``connection`` in pgvector's binary form."""
    connection.adapters.register_dumper(PackedVector, _BinaryVectorDumper)


def vector_param(vector: Sequence[float] | None) -> PackedVector | None:
    """``vector`` for a ``%s::vector`` placeholder (None stays NULL)."""
    return None if vector is None else PackedVector(vector)
