"""The stream of a query's committed changes: offsets are batch ids."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from spark_statestore.spark.reader.changes import ChangesReader, check_one_shape
from spark_statestore.spark.reader.columns import column_for, value_column
from spark_statestore.spark.reader.request import ReadRequest, int_option


class ChangeStreamReader(ChangesReader, DataSourceStreamReader):
    """The committed changes of a stateful query as a stream, from `startingBatchId`: each
    trigger reads every batch committed since the last one."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        self.starting = int_option(request.options, "startingBatchId", 0) or 0
        self.key = column_for(request.spec.key_serde)
        self.value = value_column(request.spec)

    def initialOffset(self) -> dict:
        return {"batch": self.starting - 1}

    def latestOffset(self) -> dict:
        """The newest committed batch (never before the initial offset)."""
        return {"batch": max(self.request.committed(), self.starting - 1)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end["batch"] <= start["batch"]:
            return []
        check_one_shape(self.request, start["batch"] + 1, end["batch"])
        state = self.request.state.at_batch(start["batch"] + 1)
        return [InputPartition((p, start["batch"] + 1, end["batch"])) for p in state.committed_partitions]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        number, first, last = partition.value
        return self._change_rows(number, first, last)

    def commit(self, end: dict) -> None:
        """Nothing to release: the changelogs are the writer's to keep or retire."""
