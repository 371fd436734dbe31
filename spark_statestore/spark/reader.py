"""Reading a query's spark_statestore state with Spark (`pyspark.sql.datasource`).

    spark.read.format("spark_statestore")
        .option("checkpointLocation", "/checkpoints/totals").option("store", "totals").load()

one row per record of the store (`partition`, `key`, `value`, and `window_start` /
`window_end` for window stores), keys and values decoded with the serdes the state
recorded (no processor class needed), one input partition per state partition, read on
the executors from the durable files alone (the writer's lock and local copies are never
touched). Options:

* `isolationLevel`: READ_COMMITTED (default: `spark.statestore.isolationLevel`) reads the
  newest version Spark committed; READ_UNCOMMITTED adds a prepared batch that has not.
* `batchId`: the version after that batch (time travel, within retention).
* `readChangeFeed=true` with `changeStartBatchId` (and `changeEndBatchId`, default the
  committed batch): one row per change (`batch_id`, `partition`, `change`: put / delete /
  expire, `key`, `value`, `window_start`, `window_end`).

`spark.readStream.format("spark_statestore").option("readChangeFeed", "true")` streams the
committed changes exactly once (offsets are batch ids; `startingBatchId`,
`maxBatchesPerTrigger`). `format("spark_statestore_metadata")`
describes the state: stores, partitions, committed and retained versions, snapshots, bytes.
`register_reader(spark)` registers both formats (building any operator does it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_statestore.partition.reading import StateLocation, VersionReader, change_count, changes, uncommitted_version
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.serde import serde_for
from spark_statestore.spark import compat
from spark_statestore.txn.isolation import IsolationLevel

FORMAT = "spark_statestore"
METADATA_FORMAT = "spark_statestore_metadata"
CHUNK = 65_536


# -- typed columns from serde identities -------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A Spark type for a serde identity and how a list of stored bytes becomes that column."""

    type: DataType
    convert: Callable[[list], list]
    arrow: pa.DataType | None = None  # when set, the bytes cast to it directly (UTF-8 text)


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


def _decoded(column: Column, raw: list) -> list:
    """Python values of a column (None stays None)."""
    if column.arrow is not None:
        return [None if r is None else r.decode("utf-8") for r in raw]
    return column.convert(raw)


def _arrow_column(column: Column, raw: list) -> Any:
    if column.arrow is not None:
        return pa.array(raw, pa.binary()).cast(column.arrow)
    return column.convert(raw)


def _window_fields(spec: StoreSpec) -> list[StructField]:
    if spec.window_spec is None:
        return []
    return [StructField("window_start", LongType()), StructField("window_end", LongType())]


def record_schema(spec: StoreSpec) -> StructType:
    key, value = column_for(spec.key_serde), column_for(spec.value_serde)
    return StructType(
        [StructField("partition", IntegerType()), StructField("key", key.type), StructField("value", value.type)]
        + _window_fields(spec)
    )


def change_schema(spec: StoreSpec) -> StructType:
    key, value = column_for(spec.key_serde), column_for(spec.value_serde)
    return StructType(
        [
            StructField("batch_id", LongType()),
            StructField("partition", IntegerType()),
            StructField("change", StringType()),
            StructField("key", key.type),
            StructField("value", value.type),
        ]
        + _window_fields(spec)
    )


# -- options ---------------------------------------------------------------------------------


def _option(options: Any, name: str, default: Any = None) -> Any:
    """An option by its case-insensitive name (Spark's options are)."""
    value = options.get(name.lower(), options.get(name))
    return default if value is None else value


def _int_option(options: Any, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    raw = _option(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {name} must be at least {minimum}, got {raw!r}")
    return value


@dataclass(frozen=True)
class ReadRequest:
    """What to read, checked on the driver: the state, the store, and the versions."""

    state: StateLocation
    spec: StoreSpec
    options: dict

    @staticmethod
    def of(options: Any) -> "ReadRequest":
        location = _option(options, "checkpointLocation") or _option(options, "path")
        if not location:
            raise ValueError(f"the {FORMAT} source needs option checkpointLocation (the query's checkpoint location)")
        state = StateLocation.open(str(location))
        store = _option(options, "store")
        if store is None:
            if len(state.layout.stores) != 1:
                raise ValueError(f"option store is needed: the state under {location} has stores {state.layout.names}")
            store = state.layout.stores[0].name
        return ReadRequest(state, state.store(str(store)), {str(k).lower(): v for k, v in options.items()})

    def committed(self) -> int:
        committed = self.state.committed_batch()
        return -1 if committed is None else committed


# -- batch reads -------------------------------------------------------------------------------


class StateStoreDataSource(DataSource):
    """`format("spark_statestore")`: the records or the change feed of one store."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _request(self) -> ReadRequest:
        return ReadRequest.of(self.options)

    def _change_feed(self) -> bool:
        return str(_option(self.options, "readChangeFeed", "false")).strip().lower() == "true"

    def schema(self) -> StructType:
        spec = self._request().spec
        return change_schema(spec) if self._change_feed() else record_schema(spec)

    def reader(self, schema: StructType) -> DataSourceReader:
        request = self._request()
        if self._change_feed():
            return ChangeFeedReader(request, schema)
        return RecordsReader(request, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if not self._change_feed():
            raise ValueError(
                f"a stream of {FORMAT} is the stream of committed changes: add .option('readChangeFeed', 'true')"
            )
        return ChangeStreamReader(self._request(), schema)


class RecordsReader(DataSourceReader):
    """Every record of the store at one version, one input partition per state partition."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        options = request.options
        committed = request.committed()
        batch_id = _int_option(options, "batchId")
        if batch_id is not None and batch_id > committed:
            raise ValueError(
                f"option batchId {batch_id} is after the newest committed batch ({committed}) of "
                f"{request.state.location}"
            )
        self.version = committed if batch_id is None else batch_id
        default = _default_isolation()
        self.isolation = IsolationLevel.parse(_option(options, "isolationLevel", default), "option isolationLevel")
        if batch_id is not None and self.isolation is IsolationLevel.READ_UNCOMMITTED:
            raise ValueError("option batchId reads a committed version: it cannot go with READ_UNCOMMITTED")
        self.key = column_for(request.spec.key_serde)
        self.value = column_for(request.spec.value_serde)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.request.state.partitions]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        state, spec = self.request.state, self.request.spec
        number = partition.value
        version = self.version
        if self.isolation is IsolationLevel.READ_UNCOMMITTED:
            version = uncommitted_version(state, number, version)
        window = spec.window_spec is not None
        with VersionReader(state, number, version) as reader:
            chunk: list = []
            for record in reader.records(spec):
                chunk.append(record)
                if len(chunk) >= CHUNK:
                    yield self._batch(number, chunk, window)
                    chunk = []
            if chunk:
                yield self._batch(number, chunk, window)

    def _batch(self, partition: int, records: list, window: bool) -> pa.RecordBatch:
        columns = [
            pa.array([partition] * len(records), pa.int32()),
            _arrow_column(self.key, [r[0] for r in records]),
            _arrow_column(self.value, [r[1] for r in records]),
        ]
        names = ["partition", "key", "value"]
        if window:
            size = self.request.spec.window_spec.window_size  # type: ignore[union-attr]
            starts = [r[2] for r in records]
            columns += [pa.array(starts, pa.int64()), pa.array([s + size for s in starts], pa.int64())]
            names += ["window_start", "window_end"]
        return pa.RecordBatch.from_arrays(columns, names=names)


def _default_isolation() -> str:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    found = None if spark is None else spark.conf.get("spark.statestore.isolationLevel", None)
    return found or IsolationLevel.READ_COMMITTED.value


class _ChangesReader:
    """Reading the changes of batches `start`..`end`, one input partition per state partition."""

    request: ReadRequest
    key: Column
    value: Column

    def _change_rows(self, partition: int, start: int, end: int) -> Iterator[tuple]:
        chunk: list = []
        for record in changes(self.request.state, partition, self.request.spec, start, end):
            chunk.append(record)
            if len(chunk) >= CHUNK:
                yield from self._rows(partition, chunk)
                chunk = []
        yield from self._rows(partition, chunk)

    def _rows(self, partition: int, records: list) -> Iterator[tuple]:
        spec = self.request.spec
        size = spec.window_spec.window_size if spec.window_spec is not None else None
        keys, values = _decoded(self.key, [r.key for r in records]), _decoded(self.value, [r.value for r in records])
        for record, key, value in zip(records, keys, values):
            row = (record.batch_id, partition, record.change, key, value)
            if size is not None:
                start = record.window_start
                row += (start, None if start is None or record.change == "expire" else start + size)
            yield row


class ChangeFeedReader(_ChangesReader, DataSourceReader):
    """`readChangeFeed=true`: the changes of a range of committed batches."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        options = request.options
        committed = request.committed()
        start = _int_option(options, "changeStartBatchId")
        if start is None:
            raise ValueError("readChangeFeed needs option changeStartBatchId")
        end = _int_option(options, "changeEndBatchId", committed)
        if end is None or end > committed:
            raise ValueError(f"option changeEndBatchId {end} is after the newest committed batch ({committed})")
        if start > end:
            raise ValueError(f"option changeStartBatchId {start} is after changeEndBatchId {end}")
        self.start, self.end = start, end
        self.key = column_for(request.spec.key_serde)
        self.value = column_for(request.spec.value_serde)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.request.state.partitions]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return self._change_rows(partition.value, self.start, self.end)


class ChangeStreamReader(_ChangesReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The committed changes of a stateful query as a stream: offsets are batch ids.
    Admission control: `maxBatchesPerTrigger` (state batches per trigger, Spark's
    `ReadMaxFiles`) or `maxRowsPerTrigger` (changes per trigger, at least one batch)."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        options = request.options
        self.starting = _int_option(options, "startingBatchId", 0)
        self.max_batches = _int_option(options, "maxBatchesPerTrigger", None, minimum=1)
        self.max_rows = _int_option(options, "maxRowsPerTrigger", None, minimum=1)
        self.target: int | None = None  # availableNow: the newest batch when the query started
        self.key = column_for(request.spec.key_serde)
        self.value = column_for(request.spec.value_serde)

    def initialOffset(self) -> dict:
        return {"batch": (self.starting or 0) - 1}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.request.committed()

    def getDefaultReadLimit(self) -> Any:
        if self.max_batches is not None:
            return ReadMaxFiles(self.max_batches)
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        newest = self.request.committed() if self.target is None else self.target
        first = start["batch"]
        end = newest
        if isinstance(limit, ReadMaxFiles):
            end = min(newest, first + limit.max_files)
        elif isinstance(limit, ReadMaxRows):
            end, rows = first + 1, change_count(self.request.state, first + 1)
            while end < newest and rows + (more := change_count(self.request.state, end + 1)) <= limit.max_rows:
                end, rows = end + 1, rows + more
            end = min(end, newest)
        return {"batch": max(end, first)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end["batch"] <= start["batch"]:
            return []
        return [InputPartition((p, start["batch"] + 1, end["batch"])) for p in self.request.state.partitions]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        number, first, last = partition.value
        return self._change_rows(number, first, last)

    def commit(self, end: dict) -> None:
        """Nothing to release: the changelogs are the writer's to keep or retire."""


# -- the metadata view ---------------------------------------------------------------------------


METADATA_SCHEMA = StructType(
    [
        StructField("partition", IntegerType()),
        StructField("store", StringType()),
        StructField("kind", StringType()),
        StructField("key_serde", StringType()),
        StructField("value_serde", StringType()),
        StructField("window_size", LongType()),
        StructField("retention_period", LongType()),
        StructField("committed_batch", LongType()),
        StructField("oldest_changelog", LongType()),
        StructField("newest_changelog", LongType()),
        StructField("snapshot_versions", StringType()),
        StructField("durable_bytes", LongType()),
    ]
)


class StateMetadataDataSource(DataSource):
    """`format("spark_statestore_metadata")`: one row per partition and store."""

    @classmethod
    def name(cls) -> str:
        return METADATA_FORMAT

    def schema(self) -> StructType:
        return METADATA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        location = _option(self.options, "checkpointLocation") or _option(self.options, "path")
        if not location:
            raise ValueError(f"the {METADATA_FORMAT} source needs option checkpointLocation")
        return MetadataReader(StateLocation.open(str(location)))


class MetadataReader(DataSourceReader):
    def __init__(self, state: StateLocation) -> None:
        self.state = state

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.state.partitions]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        number = partition.value
        changelogs, snapshots = self.state.versions(number)
        committed = self.state.committed_batch()
        durable = self.state.durable(number)
        size = sum(i.size for sub in ("", "snapshots", "sst") for i in durable.list(sub))
        for spec in self.state.layout.stores:
            window = spec.window_spec
            yield (
                number,
                spec.name,
                spec.kind,
                spec.key_serde,
                spec.value_serde,
                None if window is None else window.window_size,
                None if window is None else window.retention_period,
                committed,
                changelogs[0] if changelogs else None,
                changelogs[-1] if changelogs else None,
                ",".join(map(str, snapshots)),
                size,
            )


def register_reader(spark: Any) -> None:
    """Register the `spark_statestore` and `spark_statestore_metadata` formats in a session
    (as its active session: see `compat.active_session`)."""
    with compat.active_session(spark):
        spark.dataSource.register(StateStoreDataSource)
        spark.dataSource.register(StateMetadataDataSource)
