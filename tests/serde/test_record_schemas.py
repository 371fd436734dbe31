"""Record values with a schema: encoding, and the evolution rules (model tests: random values
written under one version read under the next equal a reference conversion), refused changes'
messages, the spec and layout records."""

from __future__ import annotations

import dataclasses
import json
import random

import pandas as pd
import pyarrow as pa
import pytest
from record_types import TotalV1, TotalV2, TotalV3

from spark_statestore import Serdes
from spark_statestore.partition.layout import Layout, LayoutMismatchError
from spark_statestore.serde import RecordSerde, serde_for
from spark_statestore.serde.evolution import SchemaEvolutionError, evolved
from spark_statestore.serde.schemas import schemas_as_of
from spark_statestore.spark import KeyValue
from spark_statestore.stores.spec import StoreSpec

V1 = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("score", pa.float32()),
        pa.field("name", pa.string()),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("blob", pa.binary()),
        pa.field("ok", pa.bool_()),
    ]
)


def random_v1(rng: random.Random) -> dict:
    def maybe(value):
        return None if rng.random() < 0.2 else value

    return {
        "id": rng.randint(-(2**31), 2**31 - 1),
        "score": maybe(float(rng.randint(-1000, 1000)) / 4),  # exact in float32
        "name": maybe("".join(rng.choice("aé z\x00€") for _ in range(rng.randint(0, 8)))),
        "count": rng.randint(-(2**63), 2**63 - 1),
        "blob": maybe(rng.randbytes(rng.randint(0, 5))),
        "ok": maybe(rng.random() < 0.5),
    }


def _fields(schema: pa.Schema, **changes) -> pa.Schema:
    """`schema` with fields replaced (a pa.Field), dropped (None) or added (at the end)."""
    fields = {f.name: f for f in schema}
    for name, field in changes.items():
        if field is None:
            fields.pop(name)
        else:
            fields[name] = field
    return pa.schema(list(fields.values()))


def _read_under(v2: RecordSerde, values: list[dict]) -> RecordSerde:
    v1 = Serdes.record(V1)
    stored = v1.encode_many(values)
    reader = evolved(v2, v1.history_json(), "s", lambda: 7)
    assert reader.version == 2
    return reader, stored


COMPATIBLE = {
    "add a nullable field": (
        _fields(V1, extra=pa.field("extra", pa.string())),
        {},
        lambda v: {**v, "extra": None},
    ),
    "add a field with a default": (
        _fields(V1, level=pa.field("level", pa.int64(), nullable=False)),
        {"level": 3},
        lambda v: {**v, "level": 3},
    ),
    "drop a field": (_fields(V1, name=None, blob=None), {}, lambda v: {k: x for k, x in v.items() if k not in ("name", "blob")}),
    "widen int32 to int64": (_fields(V1, id=pa.field("id", pa.int64(), nullable=False)), {}, lambda v: v),
    "widen float32 to float64": (_fields(V1, score=pa.field("score", pa.float64())), {}, lambda v: v),
    "widen int to float": (
        _fields(V1, count=pa.field("count", pa.float64(), nullable=False), id=pa.field("id", pa.float64(), nullable=False)),
        {},
        lambda v: {**v, "count": float(v["count"]), "id": float(v["id"])},
    ),
    "reorder fields": (pa.schema(list(reversed(list(V1)))), {}, lambda v: dict(reversed(list(v.items())))),
    "make a field nullable": (_fields(V1, count=pa.field("count", pa.int64())), {}, lambda v: v),
}


@pytest.mark.parametrize("change", sorted(COMPATIBLE))
def test_values_written_under_v1_read_under_a_compatible_v2(change):
    schema, defaults, reference = COMPATIBLE[change]
    rng = random.Random(change)
    values = [random_v1(rng) for _ in range(300)]
    reader, stored = _read_under(Serdes.record(schema, defaults), values)
    expected = [reference(v) for v in values]
    assert reader.decode_many(stored) == expected  # all at once
    assert [reader.decode(s) for s in stored] == expected  # one by one
    assert [list(d) for d in reader.decode_many(stored[:3])] == [schema.names] * 3  # in the new order
    # new values are written under v2 and read back as they are
    new = reader.encode_many(expected)
    assert {s[:2] for s in new} == {b"\x02\x00"} and reader.decode_many(new) == expected


def test_changes_chain_through_every_version():
    """v1 -> v2 drops `name`, v3 adds it back as an int: v1 values get v3's default, not
    their old name."""
    v1 = Serdes.record(V1)
    stored = v1.encode_many([random_v1(random.Random(1)) for _ in range(50)])
    v2 = evolved(Serdes.record(_fields(V1, name=None)), v1.history_json(), "s", lambda: 1)
    v3 = evolved(Serdes.record(_fields(V1, name=pa.field("name", pa.int64())), {"name": 5}), v2.history_json(), "s", lambda: 2)
    assert v3.version == 3 and {v["name"] for v in v3.decode_many(stored)} == {5}


def test_dataclass_values_evolve_into_the_new_class():
    v1 = Serdes.record(TotalV1)
    stored = v1.encode_many([TotalV1(i, f"l{i}") for i in range(40)])
    v2 = evolved(Serdes.record(TotalV2), v1.history_json(), "totals", lambda: 1)
    assert v2.decode_many(stored) == [TotalV2(float(i)) for i in range(40)]
    assert v2.decode(v2.encode(TotalV2(2.5, 3, "x"))) == TotalV2(2.5, 3, "x")


@pytest.mark.parametrize(
    "new, field, old_type, new_type",
    [
        (_fields(V1, name=pa.field("name", pa.int64())), "name", "string", "int64"),
        (_fields(V1, count=pa.field("count", pa.int32(), nullable=False)), "count", "int64", "int32"),
        (_fields(V1, score=pa.field("score", pa.int64())), "score", "float32", "int64"),
        (_fields(V1, score=pa.field("score", pa.float32(), nullable=False)), "score", "float32", "not null"),
        (_fields(V1, level=pa.field("level", pa.int64(), nullable=False)), "level", "int64", "without a default"),
    ],
)
def test_other_changes_are_refused_naming_the_store_the_field_both_types_and_the_way_out(new, field, old_type, new_type):
    with pytest.raises(SchemaEvolutionError) as refused:
        evolved(Serdes.record(new), Serdes.record(V1).history_json(), "scores", lambda: 1)
    message = str(refused.value)
    for part in ("store 'scores'", f"field {field!r}", old_type, new_type, "migrate=", "version 1"):
        assert part in message, (part, message)


def test_a_migration_is_a_version_that_takes_effect_in_the_next_batch():
    v1 = Serdes.record(TotalV1)
    stored = v1.encode_many([TotalV1(i, "x") for i in range(40)])
    declared = Serdes.record(TotalV3, migrate=lambda old: TotalV3(f"{old['total']}/{old['label']}"))
    v2 = evolved(declared, v1.history_json(), "totals", lambda: 9)
    assert v2.version == 2 and v2.history[-1].migrated_since == 9
    assert v2.decode_many(stored) == [TotalV3(f"{i}/x") for i in range(40)]
    assert all(v2.written_before_migration(s) for s in stored)
    assert not v2.written_before_migration(v2.encode(TotalV3("a")))
    # the reader has no migrate function: values from before it are refused, by version
    reader = serde_for("record", v2.history_json())
    with pytest.raises(ValueError, match="version 2 is a migration .batch 9."):
        reader.decode(stored[0])
    assert reader.decode(v2.encode(TotalV3("a"))) == {"total": "a"}
    # as of a batch before the migration, a reader decodes in the old shape
    before = serde_for("record", schemas_as_of(v2.history_json(), 8))
    assert before.decode(stored[3]) == {"total": 3, "label": "x"}
    assert schemas_as_of(v2.history_json(), 9) == v2.history_json()


def test_the_same_schema_keeps_its_version():
    v2 = evolved(Serdes.record(TotalV2), evolved(Serdes.record(TotalV2), Serdes.record(TotalV1).history_json(), "t", lambda: 1).history_json(), "t", lambda: 2)
    assert v2.version == 2


def test_encode_many_from_columns_equals_value_by_value():
    schema = pa.schema([("a", pa.int32()), ("b", pa.float64()), ("c", pa.bool_())])
    serde = Serdes.record(schema)
    table = pa.table({"a": pa.array(range(100), pa.int32()), "b": [i / 3 for i in range(100)], "c": [i % 2 == 0 for i in range(100)]})
    one_by_one = [serde.encode(row) for row in table.to_pylist()]
    assert serde.encode_many(table) == one_by_one
    assert serde.encode_many(table.to_pandas()) == one_by_one
    with_nulls = pa.table({"a": pa.array([1, None] * 20, pa.int32()), "b": [1.0] * 40, "c": [True] * 40})
    assert serde.decode_many(serde.encode_many(with_nulls)) == with_nulls.to_pylist()


def test_bad_values_name_the_field():
    serde = Serdes.record(V1)
    good = random_v1(random.Random(3))
    with pytest.raises(TypeError, match="value field 'id' must be int32"):
        serde.encode({**good, "id": "x"})
    with pytest.raises(TypeError, match="value field 'count' cannot be None"):
        serde.encode({**good, "count": None})
    with pytest.raises(TypeError, match="value field 'name' must be a str"):
        serde.encode({**good, "name": 3})
    with pytest.raises(TypeError, match="value field 'ok' must be a bool"):
        serde.encode({**good, "ok": 1})
    with pytest.raises(TypeError, match="value has no field 'blob'"):
        serde.encode({k: v for k, v in good.items() if k != "blob"})
    with pytest.raises(TypeError, match=r"fields the schema does not have: \['zz'\]"):
        serde.encode({**good, "zz": 1})
    with pytest.raises(ValueError, match="schema version 3 is not recorded"):
        serde.decode(b"\x03\x00")
    with pytest.raises(TypeError, match="schema must be a dataclass or a pyarrow.Schema"):
        Serdes.record({"a": int})
    with pytest.raises(TypeError, match="record fields may be one of"):
        Serdes.record(pa.schema([("l", pa.list_(pa.int64()))]))
    with pytest.raises(TypeError, match="key_serde cannot be a record serde"):
        KeyValue("s", Serdes.record(V1), Serdes.int64())


def test_the_spec_records_schema_versions_and_older_records_keep_their_bytes():
    plain = StoreSpec.key_value("kv", key_serde="string", value_serde="int64")
    assert "value_schemas" not in plain.as_dict()
    declared = KeyValue("kv", Serdes.string(), Serdes.record(TotalV1)).spec()
    recorded = json.loads(json.dumps(declared.as_dict()))
    assert recorded["value_serde"] == "record" and recorded["value_schemas"][0]["fields"][0]["name"] == "total"
    assert StoreSpec.from_dict("kv", recorded) == dataclasses.replace(declared, cached=True)
    with pytest.raises(ValueError, match="value serde 'record' with value schemas"):
        StoreSpec.from_dict("kv", {**recorded, "value_schemas": []})
    with pytest.raises(ValueError, match="unreadable schema"):
        StoreSpec.from_dict("kv", {**recorded, "value_schemas": [{"fields": [{"name": "a", "type": "list"}]}]})


def test_a_layout_accepts_added_schema_versions_and_refuses_a_key_change():
    v1 = KeyValue("kv", Serdes.string(), Serdes.record(TotalV1))
    v2 = dataclasses.replace(v1, value_serde=evolved(Serdes.record(TotalV2), v1.value_serde.history_json(), "kv", lambda: 1))
    Layout.of([v2.spec()]).check_against(Layout.of([v1.spec()]), "loc", "here")
    with pytest.raises(LayoutMismatchError, match="which do not follow them"):
        Layout.of([v1.spec()]).check_against(Layout.of([v2.spec()]), "loc", "here")
    int_keys = dataclasses.replace(v1, key_serde=Serdes.int64_key())
    with pytest.raises(LayoutMismatchError, match="keys were written with serde 'string', not 'int64_key'"):
        Layout.of([int_keys.spec()]).check_against(Layout.of([v1.spec()]), "loc", "here")


def test_values_decode_where_pandas_and_arrow_give_numpy_scalars():
    serde = Serdes.record(TotalV2)
    frame = pd.DataFrame({"total": [1.5, 2.0], "seen": [1, 2], "note": ["a", None]})
    assert serde.decode_many(serde.encode_many(frame)) == [TotalV2(1.5, 1, "a"), TotalV2(2.0, 2, None)]


def test_a_serde_travels_to_tasks_pickled():
    from pyspark import cloudpickle

    v2 = evolved(Serdes.record(TotalV2), Serdes.record(TotalV1).history_json(), "t", lambda: 1)
    copy = cloudpickle.loads(cloudpickle.dumps(v2))
    assert copy.version == 2 and copy.decode(v2.encode(TotalV2(1.0, 2))) == TotalV2(1.0, 2)
