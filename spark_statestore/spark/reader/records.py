"""Reading every record of a store at one version (`format("spark_statestore")`)."""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_statestore.partition.reading import VersionReader, uncommitted_version
from spark_statestore.spark.reader.columns import arrow_column, column_for
from spark_statestore.spark.reader.request import ReadRequest, default_isolation, int_option, option
from spark_statestore.txn.isolation import IsolationLevel

CHUNK = 65_536


class RecordsReader(DataSourceReader):
    """Every record of the store at one version, one input partition per state partition."""

    def __init__(self, request: ReadRequest, schema: StructType) -> None:
        self.request = request
        options = request.options
        committed = request.committed()
        batch_id = int_option(options, "batchId")
        if batch_id is not None and batch_id > committed:
            raise ValueError(
                f"option batchId {batch_id} is after the newest committed batch ({committed}) of "
                f"{request.state.location}"
            )
        self.committed = committed
        self.version = committed if batch_id is None else batch_id
        default = default_isolation()
        self.isolation = IsolationLevel.parse(option(options, "isolationLevel", default), "option isolationLevel")
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
        with VersionReader(state, number, version, self.committed) as reader:
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
            arrow_column(self.key, [r[0] for r in records]),
            arrow_column(self.value, [r[1] for r in records]),
        ]
        names = ["partition", "key", "value"]
        if window:
            size = self.request.spec.window_spec.window_size  # type: ignore[union-attr]
            starts = [r[2] for r in records]
            columns += [pa.array(starts, pa.int64()), pa.array([s + size for s in starts], pa.int64())]
            names += ["window_start", "window_end"]
        return pa.RecordBatch.from_arrays(columns, names=names)
