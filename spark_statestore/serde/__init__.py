"""Key encodings and value serdes (the bottom layer: imports nothing from the package).

`Serdes` is the catalogue users pick from::

    store.typed(Serdes.string(), Serdes.json())
    store.typed(Serdes.tuple(str, int), Serdes.int64())
    store.typed(Serdes.string(), Serdes.record(Totals))   # a dataclass (or a pyarrow.Schema)
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

from spark_statestore.serde.keys import Int64KeySerde, TupleKeySerde, escape, unescape
from spark_statestore.serde.records import RecordSerde, record_serde
from spark_statestore.serde.schemas import RecordSchema
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

    @staticmethod
    def record(schema: Any, defaults: dict[str, Any] | None = None, migrate: Callable | None = None) -> RecordSerde:
        """Record values with a schema (a dataclass or a `pyarrow.Schema`) whose versions are
        kept with the state; `migrate(old value as a dict) -> new value` for a change old
        values cannot follow (see README, "Changing a store's value schema")."""
        return record_serde(schema, defaults, migrate)


__all__ = [
    "ArrowSerde",
    "BytesSerde",
    "FloatSerde",
    "Int64KeySerde",
    "IntSerde",
    "JsonSerde",
    "PickleSerde",
    "RecordSchema",
    "RecordSerde",
    "Serde",
    "Serdes",
    "StrSerde",
    "TupleKeySerde",
    "escape",
    "serde_for",
    "unescape",
]


_BUILTIN_IDENTITIES = {
    "bytes": BytesSerde,
    "string": StrSerde,
    "int64_key": Int64KeySerde,
    "int64": IntSerde,
    "float64": FloatSerde,
    "json": JsonSerde,
    "pickle": PickleSerde,
    "arrow": ArrowSerde,
}
_TUPLE_TYPES = {"str": str, "int": int, "bytes": bytes}


def check_identity(identity: object, name: str) -> str:
    """`identity` if it has the form of a serde identity (a built-in name, `tuple(...)` of
    str/int/bytes, or `module:Class`); it is resolved only when used (`serde_for`)."""
    if not isinstance(identity, str) or not identity:
        raise TypeError(f"{name} must be a serde identity (a non-empty str), got {type(identity).__name__}: {identity!r}")
    if identity in _BUILTIN_IDENTITIES or identity == RecordSerde.identity:
        return identity
    if identity.startswith("tuple(") and identity.endswith(")"):
        if all(n in _TUPLE_TYPES for n in identity[len("tuple(") : -1].split(",")):
            return identity
    module, _, qualname = identity.partition(":")
    if module and qualname and all(part.isidentifier() for part in module.split(".")) and not qualname.isspace():
        return identity
    raise ValueError(
        f"{name} {identity!r} is not a serde identity: use one of {sorted(_BUILTIN_IDENTITIES)}, "
        f"tuple(str,int,...) or 'module:Class' of a Serde subclass"
    )


def serde_for(identity: str, schemas: Sequence[str] = ()) -> Serde:
    """The serde a recorded identity names: a built-in one, a record serde of the recorded
    `schemas` (decoding to dicts of the newest one), or `module:Class` built with no
    arguments. Identities come from durable files, so they are data: the module must be
    imported already (nothing is imported on a file's say-so) and the class must be a
    `Serde` subclass (nothing else is called). Raises `ValueError` naming the identity
    when it cannot be had here."""
    if not isinstance(identity, str):
        raise TypeError(f"identity must be a str, got {type(identity).__name__}: {identity!r}")
    builtin = _BUILTIN_IDENTITIES.get(identity)
    if builtin is not None:
        return builtin()
    if identity == RecordSerde.identity:
        if not schemas:
            raise ValueError("serde 'record' needs the schema versions recorded with it (StoreSpec.value_schemas)")
        history = [RecordSchema.from_json(text) for text in schemas]
        return RecordSerde(history[-1], history=history)
    if identity.startswith("tuple(") and identity.endswith(")"):
        names = identity[len("tuple(") : -1].split(",")
        if all(n in _TUPLE_TYPES for n in names):
            return TupleKeySerde(*(_TUPLE_TYPES[n] for n in names))
    module, _, qualname = identity.partition(":")
    if module and qualname:
        target: object = sys.modules.get(module)
        if target is None:
            raise ValueError(f"serde {identity!r} needs module {module!r}: import it first")
        for part in qualname.split("."):
            target = getattr(target, part, None)
        if not (isinstance(target, type) and issubclass(target, Serde)):
            raise ValueError(f"serde {identity!r} does not name a Serde class")
        try:
            return target()
        except Exception as e:
            raise ValueError(f"serde {identity!r} cannot be built here: {e}") from e
    raise ValueError(f"{identity!r} is not a serde identity this package knows")
