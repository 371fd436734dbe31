"""Setting mistakes a new user makes, caught on the driver when an operator is built (in a
classic and a Spark Connect session, through `spark.conf` alone): a misspelled
`spark.statestore.*` key, and a `transformWithStateInPandas` processor in a session
without Spark's RocksDB state store provider."""

from __future__ import annotations

import pytest

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, StoreProcessor, with_stores
from spark_statestore.spark.driver.settings import PROVIDER_CLASS, ROCKSDB_PROVIDER

pytestmark = [pytest.mark.spark]
STORES = [KeyValue("totals", Serdes.string(), Serdes.int64())]


class Counts(StoreProcessor):
    stores = STORES


def test_a_misspelled_key_fails_the_build_naming_the_closest_known_key(spark, tmp_path):
    spark.conf.set("spark.statestore.cache.maxbyte", "1m")
    try:
        with pytest.raises(ValueError, match=r"spark\.statestore\.cache\.maxbyte; did you mean spark\.statestore\.cache\.maxBytes\?"):
            with_stores(lambda *a: iter(()), str(tmp_path / "state"), STORES, spark=spark)
    finally:
        spark.conf.unset("spark.statestore.cache.maxbyte")
    assert callable(with_stores(lambda *a: iter(()), str(tmp_path / "state"), STORES, spark=spark))


def test_a_processor_without_the_rocksdb_provider_fails_naming_key_and_value(spark, tmp_path):
    import spark_jobs

    spark_jobs.skip_without_tws(spark)
    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    spark.conf.set(PROVIDER_CLASS, hdfs)
    try:
        with pytest.raises(ValueError, match=rf"need {PROVIDER_CLASS}={ROCKSDB_PROVIDER} .*got '{hdfs}'"):
            Counts(str(tmp_path / "state"), spark=spark)
    finally:
        spark.conf.set(PROVIDER_CLASS, ROCKSDB_PROVIDER)
    Counts(str(tmp_path / "state"), spark=spark)
