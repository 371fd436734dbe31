"""Reading the changes of committed batches: the change feed of a batch range and the
stream of committed changes (offsets are batch ids)."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_statestore.partition.reading import change_count, changes
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


class ChangeFeedReader(ChangesReader, DataSourceReader):
    """`readChangeFeed=true`: the changes of a range of committed batches."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        options = request.options
        committed = request.committed()
        start = int_option(options, "changeStartBatchId")
        if start is None:
            raise ValueError("readChangeFeed needs option changeStartBatchId")
        end = int_option(options, "changeEndBatchId", committed)
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


class ChangeStreamReader(ChangesReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The committed changes of a stateful query as a stream: offsets are batch ids.
    Admission control: `maxBatchesPerTrigger` (state batches per trigger, Spark's
    `ReadMaxFiles`) or `maxRowsPerTrigger` (changes per trigger, at least one batch)."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        options = request.options
        self.starting = int_option(options, "startingBatchId", 0)
        self.max_batches = int_option(options, "maxBatchesPerTrigger", None, minimum=1)
        self.max_rows = int_option(options, "maxRowsPerTrigger", None, minimum=1)
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
