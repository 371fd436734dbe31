"""The options of a read, checked on the driver: which state, which store, which
versions (Spark's options are case-insensitive strings)."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from spark_statestore.partition.reading import StateLocation
from spark_statestore.serde.schemas import schemas_as_of
from spark_statestore.spark.driver.settings import parse_bool, parse_int
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.txn.isolation import IsolationLevel

FORMAT = "spark_statestore"
METADATA_FORMAT = "spark_statestore_metadata"
# every option the formats read (Spark passes `path` for `load(path)`)
OPTIONS = (
    "path",
    "checkpointLocation",
    "store",
    "batchId",
    "isolationLevel",
    "readChangeFeed",
    "changeStartBatchId",
    "changeEndBatchId",
    "startingBatchId",
    "maxBatchesPerTrigger",
    "maxRowsPerTrigger",
)


def option(options: Any, name: str, default: Any = None) -> Any:
    """An option by its case-insensitive name (Spark's options are)."""
    value = options.get(name.lower(), options.get(name))
    return default if value is None else value


def int_option(options: Any, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    """An integer option of at least `minimum` (ValueError naming the option and the value)."""
    raw = option(options, name)
    return default if raw is None else parse_int(f"option {name}", raw, minimum)


def bool_option(options: Any, name: str, default: bool = False) -> bool:
    """A boolean option, `true` or `false` in any case (ValueError naming the option, the
    value and the accepted ones: `yes`, `1` or a typo are not taken for false)."""
    raw = option(options, name)
    return default if raw is None else parse_bool(f"option {name}", raw)


# the options with a value of their own kind, checked whatever the read (`check_option_values`)
INT_OPTIONS = {
    "batchId": 0,
    "changeStartBatchId": 0,
    "changeEndBatchId": 0,
    "startingBatchId": 0,
    "maxBatchesPerTrigger": 1,
    "maxRowsPerTrigger": 1,
}
STREAM_OPTIONS = ("startingBatchId", "maxBatchesPerTrigger", "maxRowsPerTrigger")
RANGE_OPTIONS = ("changeStartBatchId", "changeEndBatchId")


def check_option_values(options: Any) -> None:
    """Every option given has a value of its kind (at `load()`, for batch reads and streams
    alike: Spark asks a source for its schema there, before anything says which read it
    is): integers in ASCII digits at or above their minimum, booleans, isolation levels;
    options that belong to another kind of read are refused, naming it."""
    for name, minimum in INT_OPTIONS.items():
        int_option(options, name, None, minimum)
    changes = bool_option(options, "readChangeFeed")
    raw = option(options, "isolationLevel")
    isolation = None if raw is None else IsolationLevel.parse(raw, "option isolationLevel")
    given = [name for name in (*STREAM_OPTIONS, *RANGE_OPTIONS) if option(options, name) is not None]
    if not changes and given:
        raise ValueError(f"option {given[0]} goes with readChangeFeed=true (a read of changes); this reads records")
    if changes and option(options, "batchId") is not None:
        raise ValueError(
            "option batchId reads records as of a batch; the change feed reads the batches changeStartBatchId.."
            "changeEndBatchId (or a stream from startingBatchId)"
        )
    if changes and isolation is IsolationLevel.READ_UNCOMMITTED:
        raise ValueError("option isolationLevel READ_UNCOMMITTED does not apply to the change feed: it reads committed batches")
    if option(options, "maxBatchesPerTrigger") is not None and option(options, "maxRowsPerTrigger") is not None:
        raise ValueError("options maxBatchesPerTrigger and maxRowsPerTrigger cannot go together: give one of them")


def refuse_options(options: Any, names: tuple[str, ...], why: str) -> None:
    """Refuse the first of `names` that is given, saying `why` it does not apply."""
    for name in names:
        if option(options, name) is not None:
            raise ValueError(f"option {name} {why}")


def check_option_names(options: Any, known: tuple[str, ...], source: str) -> None:
    """Refuse an option `source` does not read, naming the closest one it does."""
    by_lower = {name.lower(): name for name in known}
    for given in options:
        if str(given).lower() in by_lower:
            continue
        close = difflib.get_close_matches(str(given).lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f"; did you mean {by_lower[close[0]]}?" if close else ""
        raise ValueError(f"the {source} source has no option {given!r}{hint} (its options: {', '.join(known)})")


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
