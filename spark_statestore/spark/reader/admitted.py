"""The stream of committed changes with admission control (`pyspark.sql.streaming.datasource`,
where Python streaming sources have it: `compat.FACTS.stream_admission_control`)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_statestore.partition.reading import change_count
from spark_statestore.spark.reader.request import ReadRequest, int_option
from spark_statestore.spark.reader.stream import ChangeStreamReader


class AdmittedChangeStreamReader(ChangeStreamReader, SupportsTriggerAvailableNow):
    """The stream of committed changes with admission control: `maxBatchesPerTrigger` (state
    batches per trigger, Spark's `ReadMaxFiles`) or `maxRowsPerTrigger` (changes per
    trigger, at least one batch)."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        super().__init__(request, schema)
        self.max_batches = int_option(request.options, "maxBatchesPerTrigger", None, minimum=1)
        self.max_rows = int_option(request.options, "maxRowsPerTrigger", None, minimum=1)
        self.target: int | None = None  # availableNow: the newest batch when the query started

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.request.committed()

    def getDefaultReadLimit(self) -> Any:
        if self.max_batches is not None:
            return ReadMaxFiles(self.max_batches)
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:  # type: ignore[override]
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
