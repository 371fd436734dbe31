"""The Spark column of each serde identity, and the schemas of the records and changes
of a store: what a reader decodes the stored bytes into.

A column decodes an Arrow array of stored bytes into an Arrow array of its Spark type
(`decode_arrow`): in bulk for the serdes whose bytes Arrow or numpy read directly (UTF-8
text, bytes, 8-byte big-endian numbers), through the serde one value at a time for the
others, and for any bytes the bulk path cannot take (the serde then names what it cannot
decode)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_statestore.serde import RecordSerde, serde_for
from spark_statestore.stores.spec import StoreSpec


Bulk = Callable[[pa.Array], "pa.Array | None"]  # None: these bytes need the serde


@dataclass(frozen=True)
class Column:
    """A Spark type for a serde identity, how a list of stored bytes becomes Python values
    of it (`convert`), and how an Arrow array of them becomes an Arrow column (`bulk`)."""

    type: DataType
    convert: Callable[[list], list]
    bulk: Bulk | None = None
    struct: pa.DataType | None = None  # record values: the Arrow type of their dicts


def _utf8(raw: pa.Array) -> pa.Array:
    return raw.cast(pa.string())  # checks the UTF-8 (ArrowInvalid names the bad bytes)


def _same(raw: pa.Array) -> pa.Array:
    return raw


def _fixed8(stored: str, flip_sign: bool = False) -> Bulk:
    """Bulk decoding of 8-byte big-endian numbers (`stored`: their numpy type)."""
    target = np.float64 if stored == ">f8" else np.int64

    def decode(raw: pa.Array) -> pa.Array | None:
        if pc.any(pc.not_equal(pc.binary_length(raw), 8)).as_py():
            return None  # bytes no such serde writes: the serde says what is wrong
        present = raw.drop_null() if raw.null_count else raw
        offsets = np.frombuffer(present.buffers()[1], np.int32, len(present) + 1, present.offset * 4)
        data = present.buffers()[2]
        raw_bytes = b"" if data is None else data.to_pybytes()[offsets[0] : offsets[-1]]
        numbers = np.frombuffer(raw_bytes, stored)
        if flip_sign:
            numbers = (numbers ^ np.uint64(1 << 63)).view(np.int64)
        numbers = numbers.astype(target)
        if not raw.null_count:
            return pa.array(numbers)
        valid = raw.is_valid().to_numpy(zero_copy_only=False)
        out = np.zeros(len(raw), target)
        out[valid] = numbers
        return pa.array(out, mask=~valid)

    return decode


def column_for(identity: str) -> Column:
    """The column of the values a serde with `identity` wrote."""
    if identity in ("string", "json"):  # JSON documents are shown as their text
        return Column(StringType(), lambda raw: [None if r is None else r.decode("utf-8") for r in raw], _utf8)
    if identity in ("bytes", "pickle"):  # unpickling runs code: pickled values are shown as their bytes
        return Column(BinaryType(), lambda raw: raw, _same)
    if identity in ("int64", "int64_key", "float64"):
        serde = serde_for(identity)
        stored = {"int64": ">i8", "int64_key": ">u8", "float64": ">f8"}[identity]
        return Column(
            DoubleType() if identity == "float64" else LongType(),
            serde.decode_many,
            _fixed8(stored, flip_sign=identity == "int64_key"),
        )
    serde = serde_for(identity)
    if identity.startswith("tuple("):
        names = identity[len("tuple(") : -1].split(",")
        types = {"str": StringType(), "int": LongType(), "bytes": BinaryType()}
        fields = [StructField(f"_{i}", types[n]) for i, n in enumerate(names)]
        return Column(StructType(fields), lambda raw: [None if r is None else serde.decode(r) for r in raw])
    return Column(StringType(), lambda raw: [None if r is None else repr(serde.decode(r)) for r in raw])


_RECORD_TYPES = {
    "bool": (BooleanType(), pa.bool_()),
    "int32": (IntegerType(), pa.int32()),
    "int64": (LongType(), pa.int64()),
    "float32": (FloatType(), pa.float32()),
    "float64": (DoubleType(), pa.float64()),
    "string": (StringType(), pa.string()),
    "binary": (BinaryType(), pa.binary()),
}


def value_column(spec: StoreSpec) -> Column:
    """The column of a store's values: a struct of the newest schema for record values
    (each decoded with the schema it was written with)."""
    if spec.value_serde != RecordSerde.identity:
        return column_for(spec.value_serde)
    serde = serde_for(spec.value_serde, spec.value_schemas)
    fields = serde.schema.fields  # type: ignore[attr-defined]
    spark = StructType([StructField(f.name, _RECORD_TYPES[f.type][0], f.nullable) for f in fields])
    arrow = pa.struct([pa.field(f.name, _RECORD_TYPES[f.type][1], f.nullable) for f in fields])
    return Column(spark, serde.decode_many, struct=arrow)


def decode_arrow(column: Column, raw: pa.Array) -> pa.Array:
    """An Arrow array of stored bytes (null: none) as the column's Arrow array."""
    if column.bulk is not None:
        decoded = column.bulk(raw)
        if decoded is not None:
            return decoded
    return pa.array(column.convert(raw.to_pylist()), column.struct or to_arrow_type(column.type))


def kind_fields(spec: StoreSpec) -> list[StructField]:
    """The Spark fields of the columns the store's kind adds (`StoreKind.reader_columns`:
    Arrow type names, mapped to Spark types here, outside the store layer)."""
    return [StructField(name, from_arrow_type(pa.type_for_alias(arrow))) for name, arrow in spec.store_kind.reader_columns]


def record_schema(spec: StoreSpec) -> StructType:
    key, value = column_for(spec.key_serde), value_column(spec)
    return StructType(
        [StructField("partition", IntegerType()), StructField("key", key.type), StructField("value", value.type)]
        + kind_fields(spec)
    )


def change_schema(spec: StoreSpec) -> StructType:
    key, value = column_for(spec.key_serde), value_column(spec)
    return StructType(
        [
            StructField("batch_id", LongType()),
            StructField("partition", IntegerType()),
            StructField("change", StringType()),
            StructField("key", key.type),
            StructField("value", value.type),
        ]
        + kind_fields(spec)
    )
