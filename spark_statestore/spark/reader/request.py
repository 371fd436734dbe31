"""A read checked on the driver: which state, which store, which versions (the options
themselves are checked by `options`, Spark's options are case-insensitive strings)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from spark_statestore.partition.reading import StateLocation
from spark_statestore.serde.schemas import schemas_as_of
from spark_statestore.spark.reader.options import (  # noqa: F401  (their home: the module pickled by value)
    FORMAT,
    INT_OPTIONS,
    METADATA_FORMAT,
    OPTIONS,
    RANGE_OPTIONS,
    STREAM_OPTIONS,
    bool_option,
    check_option_names,
    check_option_values,
    int_option,
    option,
    refuse_options,
)
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.txn.isolation import IsolationLevel

@dataclass(frozen=True)
class ReadRequest:
    """What to read, checked on the driver: the state, the store, and the versions."""

    state: StateLocation
    spec: StoreSpec
    options: dict

    @staticmethod
    def of(options: Any) -> "ReadRequest":
        check_option_names(options, OPTIONS, FORMAT)
        check_option_values(options)
        location = option(options, "checkpointLocation") or option(options, "path")
        if not location:
            raise ValueError(f"the {FORMAT} source needs option checkpointLocation (the query's checkpoint location)")
        state = StateLocation.open(str(location))
        store = option(options, "store")
        if store is None:
            if len(state.layout.stores) != 1:
                raise ValueError(f"option store is needed: the state under {location} has stores {state.layout.names}")
            store = state.layout.stores[0].name
        spec = state.store(str(store))
        if spec.value_schemas:  # record values are shown in their shape as of the batch read
            as_of = int_option(options, "batchId", int_option(options, "changeEndBatchId"))
            if as_of is None and bool_option(options, "readChangeFeed"):
                as_of = state.committed_batch()  # a migration declared for the next batch changes none of them
            spec = dataclasses.replace(spec, value_schemas=schemas_as_of(spec.value_schemas, as_of))
        return ReadRequest(state, spec, {str(k).lower(): v for k, v in options.items()})

    def committed(self) -> int:
        committed = self.state.committed_batch()
        return -1 if committed is None else committed


def default_isolation() -> str:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    found = None if spark is None else spark.conf.get("spark.statestore.isolationLevel", None)
    return found or IsolationLevel.READ_COMMITTED.value
