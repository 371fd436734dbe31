"""Reading the changes of committed batches: the change feed of a batch range (the
stream of committed changes is in `stream` and `admitted`)."""

from __future__ import annotations

from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_statestore.partition.reading import changes
from spark_statestore.spark.reader.columns import Column, column_for, decoded
from spark_statestore.spark.reader.records import CHUNK
from spark_statestore.spark.reader.request import ReadRequest, int_option


class ChangesReader:
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
        keys, values = decoded(self.key, [r.key for r in records]), decoded(self.value, [r.value for r in records])
        for record, key, value in zip(records, keys, values):
            row = (record.batch_id, partition, record.change, key, value)
            if size is not None:
                start = record.window_start
                row += (start, None if start is None or record.change == "expire" else start + size)
            yield row


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


class ChangeFeedReader(ChangesReader, DataSourceReader):
    """`readChangeFeed=true`: the changes of a range of committed batches."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        self.start, self.end = change_range(request)
        self.key = column_for(request.spec.key_serde)
        self.value = column_for(request.spec.value_serde)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.request.state.partitions]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return self._change_rows(partition.value, self.start, self.end)
