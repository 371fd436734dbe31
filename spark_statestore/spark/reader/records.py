"""Reading every record of a store at one version (`format("spark_statestore")`)."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_statestore.partition.columnar import StoreColumns
from spark_statestore.partition.reading import MERGE_RECORDS, VersionReader, uncommitted_version
from spark_statestore.spark.reader.columns import column_for, decode_arrow, value_column
from spark_statestore.spark.reader.filters import TakesFilters
from spark_statestore.spark.reader.request import ReadRequest, default_isolation, int_option, option
from spark_statestore.txn.isolation import IsolationLevel


class RecordsReader(TakesFilters, DataSourceReader):
    """Every record of the store at one version, one input partition per state partition
    (those Spark's filters may keep: see `filters`)."""

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
        self.state = request.state.at_batch(self.version)  # the partitions batch `version` ran on
        default = default_isolation()
        self.isolation = IsolationLevel.parse(option(options, "isolationLevel", default), "option isolationLevel")
        if batch_id is not None and self.isolation is IsolationLevel.READ_UNCOMMITTED:
            raise ValueError("option batchId reads a committed version: it cannot go with READ_UNCOMMITTED")
        self.key = column_for(request.spec.key_serde)
        self.value = value_column(request.spec)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.pushed.partitions(self.state.committed_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.pruned(partition):
            return
        state, spec = self.state, self.request.spec
        number = partition.value
        version = self.version
        if self.isolation is IsolationLevel.READ_UNCOMMITTED:
            version = uncommitted_version(state, number, version)
        keys = self.pushed.key_range(spec.key_serde)
        with VersionReader(state, number, version, self.committed, merge_records=MERGE_RECORDS) as reader:
            for chunk in reader.columns(spec, keys=keys):
                batch = self.pushed.keeps(self._batch(number, chunk))
                if len(batch):
                    yield batch

    def _batch(self, partition: int, chunk: StoreColumns) -> pa.RecordBatch:
        """One Arrow batch of rows, decoded in bulk (see `columns.decode_arrow`)."""
        columns = [
            pa.array(np.full(len(chunk), partition, np.int32)),
            decode_arrow(self.key, chunk.keys),
            decode_arrow(self.value, chunk.values),
        ]
        spec = self.request.spec
        columns += spec.store_kind.reader_values(spec, chunk.parts)
        names = ["partition", "key", "value"] + [name for name, _ in spec.store_kind.reader_columns]
        return pa.RecordBatch.from_arrays(columns, names=names)
