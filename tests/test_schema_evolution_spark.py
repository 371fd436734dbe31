"""A record store's value schema across restarts of a Spark query: a compatible change is
taken and old values are read in the new shape; an incompatible one is refused on the
driver, naming the store, the field and both types; with `migrate=` it runs (once, in the
first batch), and the state reader time-travels to either side of the migration."""

from __future__ import annotations

import collections
import os
import sys
from dataclasses import dataclass

import pandas as pd
import pytest
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.serde.evolution import SchemaEvolutionError
from spark_statestore.spark import KeyValue, partition_function, register_reader

pytestmark = [pytest.mark.spark, pytest.mark.versioned]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests
FILES = [["a", "b", "a"], ["b", "c"], ["a", "d", "d"], ["c", "e"], ["a"], ["e", "e", "b"]]


@dataclass
class CountV1:
    count: int
    last: str


@dataclass
class CountV2:  # count widened to float, `last` dropped, `batches` added with a default
    batches: int = 0
    count: float = 0.0


@dataclass
class CountV3:  # count as text: old values cannot follow
    count: str


def bump(old, cls):
    if cls is CountV1:
        return CountV1((old.count if old else 0) + 1, "x")
    if cls is CountV2:
        return CountV2((old.batches if old else 0) + 1, (old.count if old else 0.0) + 1)
    return CountV3(str(int(old.count if old else "0") + 1))


def counting(cls):
    def totals(batches, stores):
        store = stores["totals"]
        for batch in batches:
            for key in batch.column("key").to_pylist():
                store.put(key, bump(store.get(key), cls))
        return iter(())

    return totals


def _write(inputs: str, n: int, keys: list[str]) -> None:
    os.makedirs(inputs, exist_ok=True)
    temp = os.path.join(inputs, f".{n}.tmp")
    pd.DataFrame({"key": keys}).to_json(temp, orient="records", lines=True)
    os.utime(temp, (1_000_000 + n, 1_000_000 + n))  # the file source takes files by modification time
    os.replace(temp, os.path.join(inputs, f"{n:03d}.json"))


def _run(spark, job: str, files: range, serde) -> str:
    inputs, checkpoint = os.path.join(job, "input"), os.path.join(job, "checkpoint")
    for n in files:
        _write(inputs, n, FILES[n])
    cls = serde.cls
    fn = partition_function(counting(cls), checkpoint, [KeyValue("totals", Serdes.string(), serde)], partitions=2, emit_changes=False)
    events = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).json(inputs)
    query = (
        events.repartition(2, "key").mapInArrow(fn, "key string").writeStream.format("noop")
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return checkpoint


def _read(spark, checkpoint: str, **options) -> dict:
    reader = spark.read.format("spark_statestore").option("checkpointLocation", checkpoint)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    frame = reader.load().select("key", "value.*").toPandas()
    return {row["key"]: {k: v for k, v in row.items() if k != "key"} for row in frame.to_dict("records")}


def _counts(upto: int) -> dict:
    return collections.Counter(k for keys in FILES[:upto] for k in keys)


@pytest.fixture
def job(spark, tmp_path):
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
    register_reader(spark)
    yield str(tmp_path / "job")
    spark.conf.unset("spark.statestore.localDir")


def test_a_query_restarts_with_a_compatible_schema_and_with_a_migration(spark, job):
    checkpoint = _run(spark, job, range(3), Serdes.record(CountV1))
    assert _read(spark, checkpoint) == {k: {"count": n, "last": "x"} for k, n in _counts(3).items()}

    _run(spark, job, range(3, 5), Serdes.record(CountV2))  # compatible: v1 values read as v2
    after_v2 = {k: {"batches": 0, "count": float(n)} for k, n in _counts(5).items()}
    touched = collections.Counter(k for keys in FILES[3:5] for k in keys)
    for key, n in touched.items():
        after_v2[key]["batches"] = n
    assert _read(spark, checkpoint) == after_v2
    assert _read(spark, checkpoint, batchId=2) == {k: {"batches": 0, "count": float(n)} for k, n in _counts(3).items()}

    with pytest.raises(SchemaEvolutionError) as refused:  # on the driver, before any task runs
        partition_function(counting(CountV3), checkpoint, [KeyValue("totals", Serdes.string(), Serdes.record(CountV3))], partitions=2)
    for part in ("store 'totals'", "field 'count' changes type from float64 to string", "migrate="):
        assert part in str(refused.value)

    migrated = Serdes.record(CountV3, migrate=lambda old: CountV3(str(int(old["count"]))))
    _run(spark, job, range(5, 6), migrated)
    assert _read(spark, checkpoint) == {k: {"count": str(n)} for k, n in _counts(6).items()}
    assert _read(spark, checkpoint, batchId=4) == after_v2  # time travel to before the migration
