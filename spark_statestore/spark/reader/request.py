"""The options of a read, checked on the driver: which state, which store, which
versions (Spark's options are case-insensitive strings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_statestore.partition.reading import StateLocation
from spark_statestore.spark.driver.settings import parse_int
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.txn.isolation import IsolationLevel

FORMAT = "spark_statestore"
METADATA_FORMAT = "spark_statestore_metadata"


def option(options: Any, name: str, default: Any = None) -> Any:
    """An option by its case-insensitive name (Spark's options are)."""
    value = options.get(name.lower(), options.get(name))
    return default if value is None else value


def int_option(options: Any, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    """An integer option of at least `minimum` (ValueError naming the option and the value)."""
    raw = option(options, name)
    return default if raw is None else parse_int(f"option {name}", raw, minimum)


@dataclass(frozen=True)
class ReadRequest:
    """What to read, checked on the driver: the state, the store, and the versions."""

    state: StateLocation
    spec: StoreSpec
    options: dict

    @staticmethod
    def of(options: Any) -> "ReadRequest":
        location = option(options, "checkpointLocation") or option(options, "path")
        if not location:
            raise ValueError(f"the {FORMAT} source needs option checkpointLocation (the query's checkpoint location)")
        state = StateLocation.open(str(location))
        store = option(options, "store")
        if store is None:
            if len(state.layout.stores) != 1:
                raise ValueError(f"option store is needed: the state under {location} has stores {state.layout.names}")
            store = state.layout.stores[0].name
        return ReadRequest(state, state.store(str(store)), {str(k).lower(): v for k, v in options.items()})

    def committed(self) -> int:
        committed = self.state.committed_batch()
        return -1 if committed is None else committed


def default_isolation() -> str:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    found = None if spark is None else spark.conf.get("spark.statestore.isolationLevel", None)
    return found or IsolationLevel.READ_COMMITTED.value
