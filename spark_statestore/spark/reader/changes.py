"""Reading the changes of committed batches: the change feed of a batch range (the
stream of committed changes is in `stream` and `admitted`)."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_statestore.partition.columnar import ChangeColumns
from spark_statestore.partition.reading import change_columns
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
        names = ["batch_id", "partition", "change", "key", "value"]
        window = self.request.spec.window_spec
        if window is not None:
            starts = chunk.window_starts
            expiries = chunk.keys.is_null().to_numpy(zero_copy_only=False)  # an expiry has no window end
            columns += [starts, pa.array(starts.to_numpy() + window.window_size, mask=expiries)]
            names += ["window_start", "window_end"]
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
    return start, end


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
