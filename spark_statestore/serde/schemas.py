"""Record schemas and the rules of their evolution.

A `RecordSchema` is an ordered list of `FieldSpec`s (name, type, nullable, default) with
scalar types: `bool`, `int32`, `int64`, `float32`, `float64`, `string`, `binary`. It is
built from a `pyarrow.Schema` or a dataclass and recorded as JSON with the state (one entry
per version in the store's spec: `value_schemas`).

`step(old, new)` is how a value of `old` becomes one of `new` when the change is
compatible: a field added (nullable or with a default), a field dropped, a number widened
(int32 to int64, float32 to float64, an int to float64), fields reordered, a field made
nullable. `incompatibilities(old, new)` lists every other change, each naming the field and
both types: such a change needs an explicit migration.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FIXED_FORMATS = {"bool": "?", "int32": "i", "int64": "q", "float32": "f", "float64": "d"}
VARIABLE = ("string", "binary")
TYPES = tuple(FIXED_FORMATS) + VARIABLE
WIDENINGS = {("int32", "int64"), ("int32", "float64"), ("int64", "float64"), ("float32", "float64")}
_PY_TYPES = {bool: "bool", int: "int64", float: "float64", str: "string", bytes: "binary"}
_PY_CHECK = {"bool": (bool,), "int32": (int,), "int64": (int,), "float32": (float, int), "float64": (float, int),
             "string": (str,), "binary": (bytes,)}  # fmt: skip


@dataclass(frozen=True)
class FieldSpec:
    """One field of a record: its name, type, whether it may be None, and its default
    (what values written before the field existed read as; None: null)."""

    name: str
    type: str
    nullable: bool = True
    default: Any = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "nullable": self.nullable}
        if self.default is not None:
            out["default"] = self.default
        return out


@dataclass(frozen=True)
class RecordSchema:
    """The fields of a record value, in order (see module docstring)."""

    fields: tuple[FieldSpec, ...]
    migrated_since: int | None = None  # the batch a migration into this version took effect in

    @staticmethod
    def of(fields: Any, migrated_since: int | None = None) -> RecordSchema:
        """A checked schema (ValueError/TypeError naming the field and what is wrong)."""
        out = tuple(fields)
        names = [f.name for f in out]
        if not out:
            raise ValueError("a record schema needs at least one field, got none")
        if len(set(names)) != len(names):
            raise ValueError(f"a record schema must have distinct field names, got {names}")
        for f in out:
            if not isinstance(f.name, str) or not f.name:
                raise TypeError(f"a field name must be a non-empty str, got {f.name!r}")
            if f.type not in TYPES:
                raise TypeError(f"field {f.name!r} has type {f.type!r}; record fields may be one of {list(TYPES)}")
            if f.default is not None and not isinstance(f.default, _PY_CHECK[f.type]):
                raise TypeError(f"the default of field {f.name!r} ({f.type}) cannot be {f.default!r}")
        return RecordSchema(out, migrated_since)

    @staticmethod
    def from_arrow(schema: Any, defaults: dict[str, Any] | None = None) -> RecordSchema:
        """The schema of a `pyarrow.Schema` (its fields' nullability kept; `defaults` by name)."""
        import pyarrow as pa

        names = {pa.bool_(): "bool", pa.int32(): "int32", pa.int64(): "int64", pa.float32(): "float32",
                 pa.float64(): "float64", pa.string(): "string", pa.binary(): "binary"}  # fmt: skip
        defaults = dict(defaults or {})
        fields = []
        for f in schema:
            if f.type not in names:
                raise TypeError(f"field {f.name!r} has Arrow type {f.type}; record fields may be one of {list(TYPES)}")
            fields.append(FieldSpec(f.name, names[f.type], f.nullable, defaults.pop(f.name, None)))
        if defaults:
            raise ValueError(f"defaults names fields the schema does not have: {sorted(defaults)}")
        return RecordSchema.of(fields)

    @staticmethod
    def from_dataclass(record: type) -> RecordSchema:
        """The schema of a dataclass: `int` is int64, `float` float64, `X | None` nullable,
        a field's default is its default."""
        hints = typing.get_type_hints(record)
        fields = []
        for f in dataclasses.fields(record):
            hint, nullable = hints[f.name], False
            args = typing.get_args(hint)
            if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
                rest = [a for a in args if a is not type(None)]
                hint, nullable = (rest[0] if len(rest) == 1 else hint), True
            if hint not in _PY_TYPES:
                raise TypeError(f"field {f.name!r} of {record.__name__} has type {hint!r}; use bool, int, float, str, bytes")
            default = None if f.default is dataclasses.MISSING else f.default
            fields.append(FieldSpec(f.name, _PY_TYPES[hint], nullable, default))
        return RecordSchema.of(fields)

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def shape(self) -> str:
        """The fields only (two versions with the same shape are the same version)."""
        return json.dumps([f.as_dict() for f in self.fields], sort_keys=True)

    def to_json(self) -> str:
        data: dict[str, Any] = {"fields": [f.as_dict() for f in self.fields]}
        if self.migrated_since is not None:
            data["migrated_since"] = self.migrated_since
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> RecordSchema:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("fields"), list):
            raise TypeError(f"a record schema must be an object with a 'fields' list, got {text[:100]!r}")
        since = data.get("migrated_since")
        if since is not None and type(since) is not int:
            raise TypeError(f"migrated_since must be a batch id, got {since!r}")
        fields = []
        for f in data["fields"]:
            if not isinstance(f, dict) or type(f.get("nullable")) is not bool:
                raise TypeError(f"a record field must be an object with name, type and nullable, got {f!r}")
            fields.append(FieldSpec(f.get("name"), f.get("type"), f["nullable"], f.get("default")))
        return RecordSchema.of(fields, since)


def check_schemas(recorded: Any, name: str = "value_schemas") -> tuple[str, ...]:
    """Recorded schema versions (a list of JSON objects or their texts) as canonical texts."""
    if isinstance(recorded, (str, bytes)) or not isinstance(recorded, (list, tuple)):
        raise TypeError(f"{name} must be a list of record schemas, got {type(recorded).__name__}: {recorded!r:.100}")
    texts = []
    for entry in recorded:
        text = entry if isinstance(entry, str) else json.dumps(entry)
        try:
            texts.append(RecordSchema.from_json(text).to_json())
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name} holds an unreadable schema {text[:100]!r}: {e}") from None
    return tuple(texts)


def incompatibilities(old: RecordSchema, new: RecordSchema) -> list[str]:
    """Every change from `old` to `new` that old values cannot follow, one sentence each."""
    problems = []
    for f in new.fields:
        before = old.field(f.name)
        if before is None:
            if not f.nullable and f.default is None:
                problems.append(f"field {f.name!r} ({f.type}) is added without a default and is not nullable")
        elif before.type != f.type and (before.type, f.type) not in WIDENINGS:
            problems.append(f"field {f.name!r} changes type from {before.type} to {f.type}")
        elif before.nullable and not f.nullable:
            problems.append(f"field {f.name!r} ({before.type}) was nullable and is not any more")
    return problems


def step(old: RecordSchema, new: RecordSchema) -> Callable[[dict], dict]:
    """How a value of `old` (a dict) becomes one of `new`, for a compatible change."""
    plan = []
    for f in new.fields:
        before = old.field(f.name)
        if before is None:
            plan.append((f.name, None, f.default))
        else:
            plan.append((f.name, float if f.type.startswith("float") and before.type != f.type else True, None))

    def convert(row: dict) -> dict:
        out = {}
        for name, how, default in plan:
            if how is None:
                out[name] = default
            elif how is True:
                out[name] = row[name]
            else:
                value = row[name]
                out[name] = None if value is None else how(value)
        return out

    return convert


def schemas_as_of(schemas: tuple[str, ...], batch: int | None) -> tuple[str, ...]:
    """The schema versions a reader of the state as of `batch` decodes with: those before
    the first migration that took effect after it (None: all of them)."""
    if batch is None:
        return schemas
    for index, text in enumerate(schemas):
        since = RecordSchema.from_json(text).migrated_since
        if since is not None and since > batch:
            return schemas[:index]
    return schemas


def migration_batches(schemas: tuple[str, ...]) -> list[int]:
    """The batches the migrations among `schemas` took effect in, oldest first: the values
    of the batches before one and of those from it on have different shapes."""
    marked = (RecordSchema.from_json(text).migrated_since for text in schemas)
    return [since for since in marked if since is not None]
