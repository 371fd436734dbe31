"""Reading the changes of committed batches: the change feed of a batch range (the
stream of committed changes is in `stream` and `admitted`)."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_statestore.partition.columnar import ChangeColumns
from spark_statestore.partition.reading import StateLocation, change_columns
from spark_statestore.serde.schemas import migration_batches
from spark_statestore.spark.reader.columns import Column, column_for, decode_arrow, value_column
from spark_statestore.spark.reader.filters import TakesFilters
from spark_statestore.spark.reader.request import ReadRequest, int_option


class ChangesReader:
    """Reading the changes of batches `start`..`end`, one input partition per state partition."""

    request: ReadRequest
    key: Column
    value: Column

    def _change_rows(self, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """Arrow batches of change rows, decoded in bulk (see `columns.decode_arrow`)."""
        for chunk in change_columns(self.request.state, partition, self.request.spec, start, end):
            yield self._batch(partition, chunk)

    def _batch(self, partition: int, chunk: ChangeColumns) -> pa.RecordBatch:
        count = len(chunk)
        columns = [
            pa.array(np.full(count, chunk.batch_id, np.int64)),
            pa.array(np.full(count, partition, np.int32)),
            chunk.change,
            decode_arrow(self.key, chunk.keys),
            decode_arrow(self.value, chunk.values),
        ]
        spec = self.request.spec
        kind = spec.store_kind
        if kind.reader_columns:
            gone = chunk.keys.is_null().to_numpy(zero_copy_only=False)  # an expiry has no key
            columns += kind.reader_values(spec, chunk.parts, gone)
        names = ["batch_id", "partition", "change", "key", "value"] + [name for name, _ in kind.reader_columns]
        return pa.RecordBatch.from_arrays(columns, names=names)


def change_range(request: ReadRequest) -> tuple[int, int]:
    """The batches `changeStartBatchId`..`changeEndBatchId` (default: the newest committed)
    of a change-feed read, checked against the commit log."""
    options = request.options
    committed = request.committed()
    start = int_option(options, "changeStartBatchId")
    if start is None:
        raise ValueError("readChangeFeed needs option changeStartBatchId")
    end = int_option(options, "changeEndBatchId", committed)
    if end is None or end > committed:
        raise ValueError(
            f"option changeEndBatchId {end} is after the newest committed batch ({committed}) of "
            f"{request.state.location}"
        )
    if start > end:
        raise ValueError(f"option changeStartBatchId {start} is after changeEndBatchId {end}")
    check_one_shape(request, start, end)
    return start, end


def check_one_shape(request: ReadRequest, first: int, last: int) -> None:
    """The values of batches `first`..`last` all have the shape of the value column: a record
    store's values change shape at a migration, which needs the writer's `migrate` to carry
    older ones through (a reader has none), and a column holds one shape. ValueError naming
    the store, the migration's batch and what to read instead if not."""
    spec = request.spec
    if not spec.value_schemas:
        return
    state = StateLocation.open(request.state.location, request.state.filesystem)  # now: a stream runs on
    migrations = migration_batches(state.store(spec.name).value_schemas)
    column = len(migration_batches(spec.value_schemas))  # the migrations the column's shape follows

    def shape(batch: int) -> int:
        return sum(1 for since in migrations if since <= batch)

    if shape(first) == shape(last) == column:
        return
    where = f"store {spec.name!r} of {request.state.location}"
    inside = [since for since in migrations if first < since <= last]
    if inside:
        since = inside[0]
        raise ValueError(
            f"the changes of batches {first}..{last} of {where} span a migration of its value schema in batch "
            f"{since}: the values before it and from it on have different shapes (a reader cannot carry the older "
            f"ones through it: that needs the query's migrate function); read batches {first}..{since - 1} and "
            f"{since}..{last} apart (changeStartBatchId and changeEndBatchId; a stream: from startingBatchId "
            f"{since}), or use python -m spark_statestore read --changes, which shows each batch in its own shape"
        )
    if column > shape(first):  # the column's shape is that of a migration after these batches
        since = migrations[column - 1]
        raise ValueError(
            f"this stream's rows of {where} have the shape its values took in batch {since} (a migration of its "
            f"value schema), and batches {first}..{last} predate it: read them with a batch read of the change "
            f"feed (changeStartBatchId {first}, changeEndBatchId {since - 1}) and start the stream at "
            f"startingBatchId {since}"
        )
    since = migrations[column]
    raise ValueError(
        f"the value schema of {where} was migrated in batch {since}, after this stream started: its rows keep "
        f"the shape they started with; restart the stream (from batch {since} on, its rows take the new shape)"
    )


class ChangeFeedReader(TakesFilters, ChangesReader, DataSourceReader):
    """`readChangeFeed=true`: the changes of a range of committed batches (of the partitions,
    and only the rows, Spark's filters may keep: see `filters`)."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        self.start, self.end = change_range(request)
        self.key = column_for(request.spec.key_serde)
        self.value = value_column(request.spec)

    def partitions(self) -> Sequence[InputPartition]:
        numbers = self.request.state.at_batch(self.start).committed_partitions
        return [InputPartition(p) for p in self.pushed.partitions(numbers)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.pruned(partition):
            return
        for batch in self._change_rows(partition.value, self.start, self.end):
            kept = self.pushed.keeps(batch)
            if len(kept):
                yield kept
