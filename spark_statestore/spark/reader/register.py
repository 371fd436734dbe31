"""Registering the state reader's three formats in a session."""

from __future__ import annotations

from typing import Any

from pyspark import cloudpickle

from spark_statestore.spark import compat
from spark_statestore.spark.reader import options, source_class
from spark_statestore.spark.reader.metrics import MetricsDataSource
from spark_statestore.spark.reader.source_class import StateStoreDataSource
from spark_statestore.spark.reader.sources import StateMetadataDataSource


def register_reader(spark: Any) -> None:
    """Register the `spark_statestore`, `spark_statestore_metadata` and
    `spark_statestore_metrics` formats in a session
    (as its active session: see `compat.active_session`). Where pyspark's readers take
    filters (4.1+), it turns on `spark.sql.python.filterPushdown.enabled` in the session:
    the `spark_statestore` reader takes them (see `filters`), and Spark refuses such a
    reader while that setting is off."""
    if compat.FACTS.reader_filter_pushdown:
        spark.conf.set(compat.FILTER_PUSHDOWN_CONF, "true")
    cloudpickle.register_pickle_by_value(options)  # see `options`
    cloudpickle.register_pickle_by_value(source_class)
    with compat.active_session(spark):
        spark.dataSource.register(StateStoreDataSource)
        spark.dataSource.register(StateMetadataDataSource)
        spark.dataSource.register(MetricsDataSource)
