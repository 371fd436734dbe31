"""The Spark column of each serde identity, and the schemas of the records and changes
of a store: what a reader decodes the stored bytes into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
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


@dataclass(frozen=True)
class Column:
    """A Spark type for a serde identity and how a list of stored bytes becomes that column."""

    type: DataType
    convert: Callable[[list], list]
    arrow: pa.DataType | None = None  # when set, the bytes cast to it directly (UTF-8 text)
    struct: pa.DataType | None = None  # record values: the Arrow type of their dicts


def column_for(identity: str) -> Column:
    """The column of the values a serde with `identity` wrote."""
    if identity in ("string", "json"):  # JSON documents are shown as their text
        return Column(StringType(), lambda raw: raw, pa.string())
    if identity in ("bytes", "pickle"):  # unpickling runs code: pickled values are shown as their bytes
        return Column(BinaryType(), lambda raw: raw)
    if identity in ("int64", "int64_key", "float64"):
        serde = serde_for(identity)
        return Column(DoubleType() if identity == "float64" else LongType(), serde.decode_many)
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


def decoded(column: Column, raw: list) -> list:
    """Python values of a column (None stays None)."""
    if column.arrow is not None:
        return [None if r is None else r.decode("utf-8") for r in raw]
    return column.convert(raw)


def arrow_column(column: Column, raw: list) -> Any:
    if column.arrow is not None:
        return pa.array(raw, pa.binary()).cast(column.arrow)
    if column.struct is not None:
        return pa.array(column.convert(raw), column.struct)
    return column.convert(raw)


def window_fields(spec: StoreSpec) -> list[StructField]:
    if spec.window_spec is None:
        return []
    return [StructField("window_start", LongType()), StructField("window_end", LongType())]


def record_schema(spec: StoreSpec) -> StructType:
    key, value = column_for(spec.key_serde), value_column(spec)
    return StructType(
        [StructField("partition", IntegerType()), StructField("key", key.type), StructField("value", value.type)]
        + window_fields(spec)
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
        + window_fields(spec)
    )
