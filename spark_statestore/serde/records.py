"""`RecordSerde`: record values with a schema whose versions are kept with the state.

Each stored value starts with the schema version it was written with (2 bytes), then a
null bitmap, the fixed-width fields (little-endian, in schema order) and the strings and
byte strings (each a 4-byte length and its bytes). So a value is always decoded with the
schema it was written with, then carried into the newest one: compatible steps (see
`schemas.py`) run in order, and a step that is a migration runs the declared `migrate`
function (the old value as a dict in, the new value out).

The serde's identity is `"record"`; its versions are recorded in the store's spec
(`StoreSpec.value_schemas`), where the driver extends them when a query comes back with
a changed schema (`evolve`). Values decode to instances of the dataclass the serde was
declared with, else to dicts.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

from spark_statestore.serde.schemas import FIXED_FORMATS, VARIABLE, RecordSchema, step
from spark_statestore.serde.values import Serde, malformed

_VERSION = struct.Struct("<H")
_LENGTH = struct.Struct("<I")
_NUMPY = {"bool": "?", "int32": "<i4", "int64": "<i8", "float32": "<f4", "float64": "<f8"}
_ZERO = {"bool": False, "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0}
SMALL = 32  # below this many values, decode_many goes value by value


class _Codec:
    """The byte layout of one schema version (see module docstring)."""

    def __init__(self, version: int, schema: RecordSchema) -> None:
        self.version = version
        fixed = [f for f in schema.fields if f.type in FIXED_FORMATS]
        variable = [f for f in schema.fields if f.type in VARIABLE]
        self.fields = fixed + variable
        self.names = [f.name for f in self.fields]
        self.fixed = len(fixed)
        self.zeros = [_ZERO[f.type] for f in fixed]
        self.nullable = [f.nullable for f in self.fields]
        self.bools = [i for i, f in enumerate(fixed) if f.type == "bool"]
        self.text = [f.type == "string" for f in variable]
        self.bitmap = (len(self.fields) + 7) // 8
        self.head = struct.Struct(f"<H{self.bitmap}s" + "".join(FIXED_FORMATS[f.type] for f in fixed))
        self.dtype = None
        if not variable:
            import numpy as np

            self.dtype = np.dtype(
                [("version", "<u2"), ("bitmap", f"V{self.bitmap}")]
                + [(f"f{i}", _NUMPY[f.type]) for i, f in enumerate(fixed)]
            )

    def encode(self, values: list, name: str) -> bytes:
        """`values` in stored order."""
        bits = 0
        for i, value in enumerate(values):
            if value is None:
                if not self.nullable[i]:
                    raise TypeError(f"{name} field {self.names[i]!r} cannot be None")
                bits |= 1 << i
        fixed = values[: self.fixed]
        if bits:
            fixed = [self.zeros[i] if v is None else v for i, v in enumerate(fixed)]
        for i in self.bools:
            if type(fixed[i]) is not bool:
                raise TypeError(f"{name} field {self.names[i]!r} must be a bool, got {fixed[i]!r}")
        try:
            parts = [self.head.pack(self.version, bits.to_bytes(self.bitmap, "little"), *fixed)]
        except struct.error as e:
            raise self._bad_fixed(fixed, name, e) from None
        for i, value in enumerate(values[self.fixed :], self.fixed):
            try:
                raw = b"" if value is None else (value.encode("utf-8") if self.text[i - self.fixed] else bytes(value))
            except (AttributeError, TypeError, UnicodeEncodeError):
                kind = "a str" if self.text[i - self.fixed] else "bytes"
                raise TypeError(f"{name} field {self.names[i]!r} must be {kind}, got {value!r:.100}") from None
            parts.append(_LENGTH.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)

    def _bad_fixed(self, fixed: list, name: str, error: Exception) -> Exception:
        for i, value in enumerate(fixed):
            try:
                struct.pack("<" + FIXED_FORMATS[self.fields[i].type], value)
            except struct.error:
                kind = self.fields[i].type
                return TypeError(f"{name} field {self.names[i]!r} must be {kind}, got {value!r:.100}")
        return TypeError(f"{name} cannot be encoded: {error}")

    def decode(self, data: bytes, serde: Serde) -> dict:
        try:
            head = self.head.unpack_from(data)
            values = list(head[2:])
            pos = self.head.size
            for text in self.text:
                (n,) = _LENGTH.unpack_from(data, pos)
                raw = data[pos + 4 : pos + 4 + n]
                if len(raw) != n:
                    raise ValueError("a field is cut short")
                values.append(raw.decode("utf-8") if text else bytes(raw))
                pos += 4 + n
            if pos != len(data):
                raise ValueError(f"{len(data) - pos} bytes after the fields")
        except (struct.error, ValueError) as e:
            raise malformed(serde, data, e) from None
        bits = int.from_bytes(head[1], "little")
        if bits:
            values = [None if bits >> i & 1 else v for i, v in enumerate(values)]
        return dict(zip(self.names, values))

    def decode_fixed(self, data: list, serde: Serde) -> list[dict]:
        """Values of a schema without strings, all at once (numpy)."""
        import numpy as np

        assert self.dtype is not None
        if any(len(d) != self.dtype.itemsize for d in data):
            return [self.decode(d, serde) for d in data]
        rows = np.frombuffer(b"".join(data), self.dtype)
        columns = [rows[f"f{i}"].tolist() for i in range(self.fixed)]
        out = [dict(zip(self.names, values)) for values in zip(*columns)]
        bitmaps = np.frombuffer(rows["bitmap"].tobytes(), np.uint8).reshape(len(data), self.bitmap)
        for index in np.flatnonzero(bitmaps.any(axis=1)).tolist():
            bits = int.from_bytes(bitmaps[index].tobytes(), "little")
            out[index] = {k: None if bits >> i & 1 else v for i, (k, v) in enumerate(out[index].items())}
        return out

    def encode_columns(self, columns: dict) -> list[bytes] | None:
        """A column per field (numpy-convertible, no nulls) encoded all at once, or None."""
        import numpy as np

        if self.dtype is None:
            return None
        n = len(next(iter(columns.values()))) if columns else 0
        rows = np.zeros(n, self.dtype)
        rows["version"] = self.version
        for i, name in enumerate(self.names):
            column = columns.get(name)
            if column is None or getattr(column, "null_count", 0):
                return None
            array = np.asarray(column.to_numpy() if hasattr(column, "to_numpy") else column)
            if array.dtype.kind not in "biuf" or array.shape != (n,):
                return None
            rows[f"f{i}"] = array
        return rows.view(np.dtype((np.void, self.dtype.itemsize))).tolist()


class RecordSerde(Serde):
    """Record values with a schema (see module docstring). Build with `Serdes.record`."""

    builtin = True
    identity = "record"  # type: ignore[assignment]

    def __init__(
        self,
        schema: RecordSchema,
        cls: type | None = None,
        migrate: Callable[[dict], Any] | None = None,
        history: Sequence[RecordSchema] = (),
    ) -> None:
        if migrate is not None and not callable(migrate):
            raise TypeError(f"migrate must be a function from the old value to the new one, got {migrate!r:.100}")
        self.schema = schema
        self.cls = cls
        self.migrate = migrate
        self.history = tuple(history) or (schema,)
        if self.history[-1].shape() != schema.shape():
            raise ValueError("the newest recorded schema must be the declared one")
        self._codecs = [_Codec(v, s) for v, s in enumerate(self.history, 1)]
        self._chains: dict[int, Callable[[dict], Any]] = {}

    def __reduce__(self) -> tuple:
        """Pickled as its declaration (the codecs are rebuilt where it is unpickled)."""
        return (RecordSerde, (self.schema, self.cls, self.migrate, self.history))

    @property
    def version(self) -> int:
        """The version new values are written with (the newest)."""
        return len(self.history)

    def with_history(self, history: Sequence[RecordSchema]) -> RecordSerde:
        """This serde knowing every recorded version (the newest must be its schema)."""
        return RecordSerde(self.schema, self.cls, self.migrate, history)

    def history_json(self) -> tuple[str, ...]:
        return tuple(s.to_json() for s in self.history)

    # -- encoding -------------------------------------------------------------------------

    def _ordered(self, value: Any, name: str) -> list:
        codec = self._codecs[-1]
        if isinstance(value, dict):
            try:
                values = [value[n] for n in codec.names]
            except KeyError as e:
                missing = e.args[0]
                default = self.schema.field(missing)
                raise TypeError(f"{name} has no field {missing!r} ({default.type if default else '?'})") from None
            if len(value) != len(values):
                extra = sorted(set(value) - set(codec.names))
                raise TypeError(f"{name} has fields the schema does not have: {extra}")
            return values
        if self.cls is not None and isinstance(value, self.cls):
            return [getattr(value, n) for n in codec.names]
        if value is None:
            raise TypeError(f"{name} cannot be None")
        expected = f"a {self.cls.__name__} or a dict" if self.cls else "a dict"
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}: {value!r:.100}")

    def encode(self, value: Any, name: str = "value") -> bytes:
        return self._codecs[-1].encode(self._ordered(value, name), name)

    def encode_many(self, values: Any, name: str = "value") -> list[bytes]:
        """A list of values, or columns (a pandas DataFrame, an Arrow Table or RecordBatch)
        with a column per field: numeric columns without nulls are encoded at once."""
        columns = _columns_of(values)
        if columns is not None:
            fast = self._codecs[-1].encode_columns(columns)
            if fast is not None:
                return fast
            values = values.to_pylist() if hasattr(values, "to_pylist") else values.to_dict("records")
        encode = self.encode
        return [encode(v, name) for v in values]

    # -- decoding -------------------------------------------------------------------------

    def _codec(self, data: bytes) -> _Codec:
        if len(data) < 2:
            raise malformed(self, data, "it has no schema version")
        (version,) = _VERSION.unpack_from(data)
        if not 1 <= version <= len(self._codecs):
            raise malformed(self, data, f"schema version {version} is not recorded (versions 1 to {self.version})")
        return self._codecs[version - 1]

    def _chain(self, version: int) -> Callable[[dict], Any]:
        """How a value written with `version` (a dict) becomes the newest value."""
        chain = self._chains.get(version)
        if chain is None:
            chain = self._build_chain(version)
            self._chains[version] = chain
        return chain

    def _build_chain(self, version: int) -> Callable[[dict], Any]:
        steps: list[Callable[[dict], Any]] = []
        for index in range(version, len(self.history)):  # into version index + 1
            target = self.history[index]
            if target.migrated_since is None:
                steps.append(step(self.history[index - 1], target))
                continue
            if index != _last_migration(self.history) or self.migrate is None:
                return _unreadable(self, version, index + 1, target)
            steps.append(_migration(self.migrate, self.cls))  # into the declared (newest) shape
            break
        cls = self.cls

        def chain(row: dict) -> Any:
            for convert in steps:
                row = convert(row)
            return row if cls is None else cls(**row)

        return chain

    def decode(self, data: bytes) -> Any:
        codec = self._codec(data)
        return self._chain(codec.version)(codec.decode(data, self))

    def decode_many(self, data: list) -> list:
        if len(data) < SMALL or None in data:
            return super().decode_many(data)
        codecs = [self._codec(d) for d in data]
        if all(c is codecs[0] for c in codecs) and codecs[0].dtype is not None:
            chain = self._chain(codecs[0].version)
            return [chain(row) for row in codecs[0].decode_fixed(data, self)]
        return [self._chain(c.version)(c.decode(d, self)) for c, d in zip(codecs, data)]

    def written_before_migration(self, data: bytes) -> bool:
        """Whether a stored value predates the newest migration (it is rewritten once)."""
        boundary = _last_migration(self.history)
        return boundary is not None and self._codec(data).version <= boundary

    def __repr__(self) -> str:
        return f"RecordSerde({self.cls.__name__ if self.cls else self.schema.names}, version={self.version})"


def _last_migration(history: Sequence[RecordSchema]) -> int | None:
    """The index of the newest version that is a migration (None: there is none)."""
    marked = [i for i, s in enumerate(history) if s.migrated_since is not None]
    return marked[-1] if marked else None


def _migration(migrate: Callable[[dict], Any], cls: type | None) -> Callable[[dict], Any]:
    """The declared migration, its result as a dict of the newest schema's fields."""

    def run(row: dict) -> dict:
        new = migrate(row)
        if isinstance(new, dict):
            return new
        if cls is not None and isinstance(new, cls):
            return {f.name: getattr(new, f.name) for f in dataclasses.fields(cls)}
        raise TypeError(f"migrate must return the new value (a dict or the declared dataclass), got {new!r:.100}")

    return run


def _unreadable(serde: RecordSerde, version: int, target: int, schema: RecordSchema) -> Callable[[dict], Any]:
    def refuse(row: dict) -> Any:
        raise ValueError(
            f"a value written with schema version {version} cannot be read as version {serde.version}: "
            f"version {target} is a migration (batch {schema.migrated_since}) and this serde has no "
            f"migrate function for it"
        )

    return refuse


def _columns_of(values: Any) -> dict | None:
    """The columns of a DataFrame, Arrow Table or RecordBatch by name (None for anything else)."""
    import pyarrow as pa

    if isinstance(values, (pa.Table, pa.RecordBatch)):
        return {name: values.column(name) for name in values.schema.names}
    if type(values).__name__ == "DataFrame" and hasattr(values, "columns"):
        return {str(name): values[name] for name in values.columns}
    return None


def record_serde(schema: Any, defaults: dict[str, Any] | None = None, migrate: Callable | None = None) -> RecordSerde:
    """A record serde for a dataclass (values are its instances) or a `pyarrow.Schema`
    (values are dicts; `defaults` gives added fields their values)."""
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        if defaults:
            raise ValueError("defaults are a dataclass's own field defaults: give none with a dataclass")
        return RecordSerde(RecordSchema.from_dataclass(schema), schema, migrate)
    import pyarrow as pa

    if isinstance(schema, pa.Schema):
        return RecordSerde(RecordSchema.from_arrow(schema, defaults), None, migrate)
    raise TypeError(f"schema must be a dataclass or a pyarrow.Schema, got {type(schema).__name__}: {schema!r:.100}")
