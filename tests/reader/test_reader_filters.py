"""Filters pushed to the state reader (pyspark 4.1+): a batch keeps every row Spark's own
check of the same filters keeps (and, but for `In` under `Not`, no other), for random
filters over random rows with nulls; a key range bounds the store's scan (string keys and
signed int64 keys, over a snapshot and a changelog that deletes and rewrites keys, TTL
stores too) and the reader's rows equal the filtered full read; and in Spark (a classic
session: a Connect client's filters reach the same workers) a filtered read returns what
filtering the full read returns, a partition the filters rule out is not read at all, and
so is the change feed's."""

from __future__ import annotations

import operator
import os
import random
import shutil
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import datasource
from pyspark.sql.datasource import InputPartition

from spark_statestore import MissingStateError, Serdes
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import StateLocation, VersionReader
from spark_statestore.spark import KeyValue, compat, register_reader
from spark_statestore.spark.reader.columns import change_schema, record_schema
from spark_statestore.spark.reader.filters import PushedFilters
from spark_statestore.spark.reader.records import RecordsReader
from spark_statestore.spark.reader.request import ReadRequest
from spark_statestore.spark.reader.stream import ChangeStreamReader

pytestmark = [
    pytest.mark.versioned,
    pytest.mark.classic_only,
    pytest.mark.skipif(
        not compat.FACTS.reader_filter_pushdown, reason=f"pyspark {compat.VERSION} readers take no filters"
    ),
]
F = datasource  # the filter classes (pyspark 4.1+)
TEXTS = ["", "a", "a\x00", "ab", "abc", "b", "é", "éa", "\U0001f600", "z"]
NUMBERS = [-(2**63), -7, -1, 0, 1, 5, 2**63 - 1]


def _spark_truth(condition, row: dict):
    """Spark's three-valued truth of one filter on one row (None: null)."""
    name = type(condition).__name__
    if name == "Not":
        inner = _spark_truth(condition.child, row)
        return None if inner is None else not inner
    value, literal = row[condition.attribute[0]], getattr(condition, "value", None)
    if name in ("IsNull", "IsNotNull"):
        return (value is None) == (name == "IsNull")
    if name == "EqualNullSafe":
        return value is None if literal is None else value == literal
    if value is None or literal is None:
        return None
    if name == "In":
        if value in [v for v in literal if v is not None]:
            return True
        return None if None in literal else False
    return _COMPARE[name](value, literal)


_COMPARE = {
    "EqualTo": operator.eq,
    "GreaterThan": operator.gt,
    "GreaterThanOrEqual": operator.ge,
    "LessThan": operator.lt,
    "LessThanOrEqual": operator.le,
    "StringStartsWith": str.startswith,
    "StringEndsWith": str.endswith,
    "StringContains": lambda value, literal: literal in value,
}


def _spark_keeps(filters, row: dict) -> bool:
    return all(_spark_truth(c, row) is True for c in filters)


def _random_filter(rng: random.Random, depth: int = 0):
    column = rng.choice(["partition", "key", "value", "flag", "score"])
    pool = {
        "partition": [0, 1, 2, 3],
        "key": TEXTS + [None],
        "value": NUMBERS + [None],
        "flag": [True, False],
        "score": [0.5, float("nan")],
    }[column]
    kind = rng.choice(
        ["EqualTo", "EqualNullSafe", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "In",
         "IsNull", "IsNotNull", "Not", "StringStartsWith", "StringEndsWith", "StringContains"]
    )
    if kind == "Not":
        return F.Not(_random_filter(rng, depth + 1)) if depth < 2 else F.IsNotNull((column,))
    if kind in ("IsNull", "IsNotNull"):
        return getattr(F, kind)((column,))
    if kind == "In":
        return F.In((column,), tuple(rng.choice(pool) for _ in range(rng.randint(1, 4))))
    if kind.startswith("String"):
        return getattr(F, kind)(("key",), rng.choice(["", "a", "é", "b", "\x00"]))
    literal = rng.choice(pool)
    return getattr(F, kind)((column,), literal if kind == "EqualNullSafe" else (literal if literal is not None else pool[0]))


def _random_rows(rng: random.Random, count: int) -> list[dict]:
    return [
        {
            "partition": rng.randint(0, 3),
            "key": rng.choice(TEXTS + [None]),
            "value": rng.choice(NUMBERS + [None]),
            "flag": rng.choice([True, False, None]),
            "score": rng.choice([0.5, float("nan"), None, 2.0]),
        }
        for _ in range(count)
    ]


def _has_in_under_not(condition, under_not: bool = False) -> bool:
    name = type(condition).__name__
    if name == "Not":
        return _has_in_under_not(condition.child, True)
    return under_not and name == "In"


def test_a_batch_keeps_every_row_spark_keeps_and_no_other():
    rng = random.Random(7)
    schema = pa.schema(
        [("partition", pa.int32()), ("key", pa.string()), ("value", pa.int64()), ("flag", pa.bool_()),
         ("score", pa.float64())]
    )
    compared = exact = 0
    for _ in range(400):
        rows = _random_rows(rng, 60)
        batch = pa.RecordBatch.from_pylist(rows, schema=schema)
        filters = tuple(_random_filter(rng) for _ in range(rng.randint(1, 3)))
        kept = PushedFilters(filters).keeps(batch).to_pylist()
        expected = [row for row in rows if _spark_keeps(filters, row)]
        # every row Spark keeps is kept (Spark's check of what is kept gives Spark's result)
        assert _sorted(expected) == _sorted([r for r in kept if _spark_keeps(filters, r)]), filters
        if not any(_has_in_under_not(c) or _on_score(c) for c in filters):
            assert _sorted(kept) == _sorted(expected), filters
            exact += 1
        compared += 1
    assert exact > 200  # most filter lists are checked for equality, not only for keeping more


def _on_score(condition) -> bool:
    name = type(condition).__name__
    return _on_score(condition.child) if name == "Not" else condition.attribute == ("score",)


def _sorted(rows: list[dict]) -> list:
    return sorted(repr(sorted(row.items())) for row in rows)


def test_filters_on_float_columns_and_literals_of_another_type_keep_every_row():
    """A literal of another Python type than its column's is not used: Arrow would truncate
    a float or Decimal for an integer column (`value < 1.5` as `value < 1`, dropping 1)."""
    batch = pa.RecordBatch.from_pylist(
        [{"key": "a", "score": float("nan"), "value": 1, "blob": b"a"},
         {"key": "b", "score": 1.0, "value": -1, "blob": b"b"}],
        schema=pa.schema(
            [("key", pa.string()), ("score", pa.float64()), ("value", pa.int64()), ("blob", pa.binary())]
        ),
    )
    for condition in (
        F.GreaterThan(("score",), 5.0), F.EqualTo(("key",), 3), F.EqualTo(("key", "nested"), "a"),
        F.LessThan(("value",), 1.5), F.LessThan(("value",), Decimal("1.5")), F.GreaterThan(("value",), -1.5),
        F.Not(F.EqualTo(("value",), 1.5)), F.Not(F.In(("value",), (Decimal("-1.5"), 1.0))),
        F.Not(F.EqualNullSafe(("value",), True)), F.LessThan(("key",), b"b"), F.GreaterThan(("blob",), "a"),
    ):
        assert PushedFilters((condition,)).keeps(batch).num_rows == 2, condition
    assert PushedFilters((F.LessThan(("partition",), 1.5),)).partitions([0, 1, 2]) == [0, 1, 2]


def test_partitions_the_filters_rule_out_are_not_read():
    pushed = PushedFilters((F.In(("partition",), (1, 3, 9)), F.Not(F.EqualTo(("partition",), 3))))
    assert pushed.partitions([0, 1, 2, 3]) == [1]
    assert PushedFilters((F.EqualTo(("key",), "a"),)).partitions([0, 1, 2]) == [0, 1, 2]
    assert PushedFilters((F.GreaterThan(("partition",), 5),)).partitions([0, 1]) == []


STORES = [
    KeyValue("names", Serdes.string(), Serdes.int64()),
    KeyValue("ids", Serdes.int64_key(), Serdes.int64()),
    KeyValue("timed", Serdes.string(), Serdes.int64(), ttl=10**12),
]
PARTITIONS = 3


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """Batch 0 writes every key; batch 1 (a changelog over batch 0's snapshot) rewrites
    some and deletes others; both committed."""
    root = tmp_path_factory.mktemp("filters")
    checkpoint = str(root / "checkpoint")
    specs = [s.spec() for s in STORES]
    record_query_layout(checkpoint, Layout.of(specs, PARTITIONS))
    rng = random.Random(3)
    for batch in range(2):
        for p in range(PARTITIONS):
            state = PartitionState(
                checkpoint, p, specs, WorkerResources(str(root / "local")),
                PartitionOptions(partitions=PARTITIONS, snapshot_interval=1),
            )
            state.open(batch)
            stores = {s.name: s.typed(state.store(s.name)) for s in STORES}
            for key in TEXTS + [f"{t}{i}" for t in TEXTS for i in range(20)]:
                if batch == 0 or rng.random() < 0.3:
                    stores["names"].put(key, rng.randint(0, 99) * (p + 1))
                    stores["timed"].put(key, rng.randint(0, 99))
                elif rng.random() < 0.2:
                    stores["names"].delete(key)
            for number in NUMBERS + list(range(-40, 40)):
                if batch == 0 or rng.random() < 0.3:
                    stores["ids"].put(number, number % 7 + p)
            state.prepare()
            state.close()
            state.wait_for_snapshots()
    os.makedirs(os.path.join(checkpoint, "commits"))
    for batch in range(2):
        with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
            f.write("v1\n{}")
    return checkpoint


def _read_in_process(checkpoint: str, store: str, filters=()) -> list[dict]:
    request = ReadRequest.of({"checkpointLocation": checkpoint, "store": store})
    reader = RecordsReader(request, record_schema(request.spec))
    if filters:
        assert list(reader.pushFilters(list(filters))) == list(filters)  # all handed back to Spark
    rows = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            rows += batch.to_pylist()
    return rows


def _key_filter(rng: random.Random, pool: list):
    kind = rng.choice(["EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "In", "Starts"])
    if kind == "In":
        return F.In(("key",), tuple(rng.choice(pool) for _ in range(rng.randint(1, 3))))
    if kind == "Starts":
        return F.StringStartsWith(("key",), rng.choice(["a", "é", "\U0001f600", "b1", "z"]))
    return getattr(F, kind)(("key",), rng.choice(pool))


@pytest.mark.parametrize("store, pool", [("names", TEXTS + ["a1", "ab19", "é7"]), ("timed", TEXTS + ["b3"]),
                                         ("ids", NUMBERS + [-3, 12])])
def test_a_filtered_read_equals_the_full_read_filtered(state, store, pool):
    full = _read_in_process(state, store)
    assert len(full) > 100
    rng = random.Random(store)
    for _ in range(40):
        filters = [_key_filter(rng, pool) for _ in range(rng.randint(1, 2))]
        if store == "ids":
            filters = [f for f in filters if not isinstance(f, F.StringStartsWith)] or [F.LessThan(("key",), 0)]
        if rng.random() < 0.3:
            filters.append(F.In(("partition",), (0, 2)))
        expected = [row for row in full if _spark_keeps(filters, row)]
        assert _sorted(_read_in_process(state, store, filters)) == _sorted(expected), filters


@pytest.mark.parametrize("store, key", [("names", "ab"), ("timed", "é"), ("ids", -7)])
def test_a_key_range_bounds_the_scan(state, store, key):
    """An equality on the key scans one record (without the bound the scan reads them all)."""
    location = StateLocation.open(state)
    spec = location.store(store)
    pushed = PushedFilters((F.EqualTo(("key",), key),))
    bounds = pushed.key_range(spec.key_serde)
    assert bounds[0] is not None and bounds[1] is not None
    scanned = []
    for keys in (bounds, (None, None)):
        with VersionReader(location, 0, 1, 1, merge_records=1 << 20) as reader:
            scanned.append(sum(len(chunk) for chunk in reader.columns(spec, keys=keys)))
    assert scanned[0] == 1 and scanned[1] > 50


def test_no_key_range_for_keys_whose_bytes_do_not_sort_as_their_column():
    pushed = PushedFilters((F.EqualTo(("key",), 3), F.LessThan(("key",), 9)))
    assert pushed.key_range("int64") == (None, None)  # two's complement: -1 sorts after 1
    assert pushed.key_range("string") == (None, None)  # a literal of another type
    for key_serde in ("bytes", "int64_key"):  # a text prefix is no byte range of other keys
        assert PushedFilters((F.StringStartsWith(("key",), "a"),)).key_range(key_serde) == (None, None)
    assert PushedFilters((F.StringStartsWith(("key",), "\U0010ffff"),)).key_range("string") == (b"\xf4\x8f\xbf\xbf", b"\xf4\x8f\xbf\xc0")


# In Spark


@pytest.fixture
def registered(spark, state):
    register_reader(spark)
    assert spark.conf.get(compat.FILTER_PUSHDOWN_CONF) == "true"
    return state


def _load(spark, checkpoint: str, **options):
    reader = spark.read.format("spark_statestore").option("checkpointLocation", checkpoint)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


CONDITIONS = {
    "partition = 1": lambda r: r["partition"] == 1,
    "key = 'ab'": lambda r: r["key"] == "ab",
    "key >= 'a' and key < 'b' and partition in (0, 2)": lambda r: "a" <= r["key"] < "b" and r["partition"] in (0, 2),
    "key like 'é%'": lambda r: r["key"].startswith("é"),
    "not (key <=> 'a') and value > 50": lambda r: r["key"] != "a" and r["value"] > 50,
    "partition = 7": lambda r: False,
}


@pytest.mark.spark
def test_filtered_reads_in_spark(spark, registered):
    frame = _load(spark, registered, store="names")
    full = [row.asDict() for row in frame.collect()]
    assert len(full) > 100
    for condition, keeps in CONDITIONS.items():
        got = [row.asDict() for row in frame.where(condition).collect()]
        assert _sorted(got) == _sorted([row for row in full if keeps(row)]), condition
    feed = _load(spark, registered, store="names", readChangeFeed="true", changeStartBatchId="1")
    changes = [row.asDict() for row in feed.collect()]
    got = [row.asDict() for row in feed.where("change = 'delete' and partition = 2").collect()]
    assert got and _sorted(got) == _sorted([r for r in changes if r["change"] == "delete" and r["partition"] == 2])


@pytest.mark.spark
def test_a_partition_the_filters_rule_out_is_not_read(spark, registered, tmp_path):
    """With partition 2's durable files gone, a read of partitions 0 and 1 still works
    (nothing of partition 2 is opened), and a read that needs partition 2 fails naming it."""
    checkpoint = str(tmp_path / "copy")
    shutil.copytree(registered, checkpoint)
    shutil.rmtree(os.path.join(checkpoint, "statestore", "2"))
    for options in ({"store": "names"}, {"store": "names", "readChangeFeed": "true", "changeStartBatchId": "0"}):
        frame = _load(spark, checkpoint, **options)
        assert frame.where("partition < 2").count() > 0
        with pytest.raises(Exception, match="partition 2"):
            frame.where("partition = 2").collect()


def test_a_partition_whose_files_are_gone_fails_the_read_instead_of_being_left_out(state, tmp_path):
    checkpoint = str(tmp_path / "copy")
    shutil.copytree(state, checkpoint)
    shutil.rmtree(os.path.join(checkpoint, "statestore", "1"))
    with pytest.raises(MissingStateError, match="partition 1"):
        _read_in_process(checkpoint, "names")
    assert {row["partition"] for row in _read_in_process(checkpoint, "names", [F.EqualTo(("partition",), 2)])} == {2}


def test_the_partition_pyspark_reads_when_every_partition_was_ruled_out_has_no_rows(state):
    """pyspark reads one partition when `partitions()` keeps none: None up to 4.2,
    `InputPartition(None)` from 4.3."""
    request = ReadRequest.of({"checkpointLocation": state, "store": "names"})
    reader = RecordsReader(request, record_schema(request.spec))
    reader.pushFilters([F.EqualTo(("partition",), 9)])
    assert reader.partitions() == []
    assert list(reader.read(None)) == [] and list(reader.read(InputPartition(None))) == []


def test_the_change_stream_reads_a_partition_whose_files_are_gone_and_fails(state, tmp_path):
    """As a batch read: the stream of committed changes covers every partition of the
    generation's count, so one whose files are gone fails naming it instead of being left out."""
    checkpoint = str(tmp_path / "copy")
    shutil.copytree(state, checkpoint)
    shutil.rmtree(os.path.join(checkpoint, "statestore", "1"))
    request = ReadRequest.of({"checkpointLocation": checkpoint, "store": "names"})
    reader = ChangeStreamReader(request, change_schema(request.spec))
    partitions = reader.partitions({"batch": -1}, {"batch": 1})
    assert [p.value for p in partitions] == [(0, 0, 1), (1, 0, 1), (2, 0, 1)]
    with pytest.raises(MissingStateError, match="partition 1"):
        list(reader.read(partitions[1]))


def _offsets(checkpoint: str, shuffle_partitions: str) -> None:
    """Spark's offset log entries of batches 0 and 1, as a query writes them."""
    os.makedirs(os.path.join(checkpoint, "offsets"), exist_ok=True)
    for batch in range(2):
        with open(os.path.join(checkpoint, "offsets", str(batch)), "w") as f:
            f.write('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{"spark.sql.shuffle.partitions":"%s"}}\n{}'
                    % shuffle_partitions)


@pytest.mark.parametrize("offsets", [None, "3", "bad", "0"])
def test_without_a_recorded_count_spark_s_offset_log_gives_it(state, tmp_path, offsets):
    """The operators Spark shuffles into its state partitions (with_stores, StoreProcessor)
    record no partition count: Spark's offset log has it, so a partition whose files are
    gone fails the read there too; with no usable count, the partitions with files are read."""
    checkpoint = str(tmp_path / "copy")
    shutil.copytree(state, checkpoint)
    os.remove(os.path.join(checkpoint, "statestore", "_layout"))
    record_query_layout(checkpoint, Layout.of([s.spec() for s in STORES]))
    assert StateLocation.open(checkpoint).layout.partitions is None
    if offsets is not None:
        _offsets(checkpoint, offsets)
    shutil.rmtree(os.path.join(checkpoint, "statestore", "1"))
    if offsets == "3":
        with pytest.raises(MissingStateError, match="partition 1"):
            _read_in_process(checkpoint, "names")
    else:
        assert {row["partition"] for row in _read_in_process(checkpoint, "names")} == {0, 2}
