"""A record store's value schema across restarts of a Spark query: a compatible change is
taken and old values are read in the new shape; an incompatible one is refused on the
driver, naming the store, the field and both types; with `migrate=` it runs (once, in the
first batch), and the state reader time-travels to either side of the migration."""

from __future__ import annotations

import collections
import os

import pytest
from pyspark import cloudpickle

from spark_statestore import Serdes
from spark_statestore.serde.evolution import SchemaEvolutionError
from spark_statestore.spark import KeyValue, partition_function, register_reader

# on the newest minor: the schema checks and migrations are the stores', the query around them any minor's
import schema_evolution as ex  # the example job: its dataclasses and processing function

pytestmark = [pytest.mark.spark, pytest.mark.classic_only]

cloudpickle.register_pickle_by_value(ex)  # the workers cannot import examples
FILES = ex.PURCHASES


def _run(spark, job: str, files: range, serde) -> str:
    ex.run(spark, job, files, serde)
    return os.path.join(job, "checkpoint")


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
    checkpoint = _run(spark, job, range(2), Serdes.record(ex.TotalV1))
    assert _read(spark, checkpoint) == {k: {"purchases": n, "last_item": "book"} for k, n in _counts(2).items()}

    _run(spark, job, range(2, 4), Serdes.record(ex.TotalV2))  # compatible: v1 values read as v2
    after_v2 = {k: {"spend": 0.0, "purchases": n} for k, n in _counts(4).items()}
    for key, n in collections.Counter(k for keys in FILES[2:4] for k in keys).items():
        after_v2[key]["spend"] = 9.5 * n
    assert _read(spark, checkpoint) == after_v2
    assert _read(spark, checkpoint, batchId=1) == {k: {"spend": 0.0, "purchases": n} for k, n in _counts(2).items()}

    with pytest.raises(SchemaEvolutionError) as refused:  # on the driver, before any task runs
        partition_function(ex.counting(ex.TotalV3), checkpoint, [KeyValue("totals", Serdes.string(), Serdes.record(ex.TotalV3))], partitions=2)
    for part in ("store 'totals'", "field 'purchases' changes type from int64 to string", "migrate="):
        assert part in str(refused.value)

    migrated = Serdes.record(ex.TotalV3, migrate=lambda old: ex.TotalV3(str(old["purchases"])))
    _run(spark, job, range(4, 5), migrated)
    assert _read(spark, checkpoint) == {k: {"purchases": str(n)} for k, n in _counts(5).items()}
    assert _read(spark, checkpoint, batchId=3) == after_v2  # time travel to before the migration
