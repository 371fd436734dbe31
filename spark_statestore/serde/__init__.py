"""Key encodings and value serdes (the bottom layer: imports nothing from the package).

`Serdes` is the catalogue users pick from::

    store.typed(Serdes.string(), Serdes.json())
    store.typed(Serdes.tuple(str, int), Serdes.int64())
"""

from __future__ import annotations

from spark_statestore.serde.keys import Int64KeySerde, TupleKeySerde, escape, unescape
from spark_statestore.serde.values import (
    ArrowSerde,
    BytesSerde,
    FloatSerde,
    IntSerde,
    JsonSerde,
    PickleSerde,
    Serde,
    StrSerde,
)


class Serdes:
    """Factories for the built-in serdes. Key serdes (`string`, `int64_key`, `tuple`) are
    order-preserving; `int64()` is a compact value serde that is not."""

    @staticmethod
    def bytes() -> Serde:
        return BytesSerde()

    @staticmethod
    def string() -> Serde:
        return StrSerde()

    @staticmethod
    def int64_key() -> Serde:
        return Int64KeySerde()

    @staticmethod
    def int64() -> Serde:
        return IntSerde()

    @staticmethod
    def float64() -> Serde:
        return FloatSerde()

    @staticmethod
    def json() -> Serde:
        return JsonSerde()

    @staticmethod
    def pickle() -> Serde:
        return PickleSerde()

    @staticmethod
    def arrow() -> Serde:
        return ArrowSerde()

    @staticmethod
    def tuple(*component_types: type) -> TupleKeySerde:
        return TupleKeySerde(*component_types)


__all__ = [
    "ArrowSerde",
    "BytesSerde",
    "FloatSerde",
    "Int64KeySerde",
    "IntSerde",
    "JsonSerde",
    "PickleSerde",
    "Serde",
    "Serdes",
    "StrSerde",
    "TupleKeySerde",
    "escape",
    "unescape",
]
