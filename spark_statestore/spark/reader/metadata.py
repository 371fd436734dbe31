"""`format("spark_statestore_metadata")`: one row per partition and store describing the
durable state (stores, committed and retained versions, snapshots, bytes)."""

from __future__ import annotations

from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from spark_statestore.checkpoint.files import PartitionFiles
from spark_statestore.partition.reading import StateLocation


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


class MetadataReader(DataSourceReader):
    """The metadata rows of one partition's durable state."""

    def __init__(self, state: StateLocation) -> None:
        self.state = state

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.state.partitions]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        number = partition.value
        changelogs, snapshots = self.state.versions(number)
        committed = self.state.committed_batch()
        durable = self.state.durable(number)
        size = sum(PartitionFiles.read(durable).totals().values())
        for spec in self.state.layout.stores:
            facts = spec.store_kind.facts(spec)
            yield (
                number,
                spec.name,
                spec.kind,
                spec.key_serde,
                spec.value_serde,
                facts.get("window_size"),
                facts.get("retention_period"),
                committed,
                changelogs[0] if changelogs else None,
                changelogs[-1] if changelogs else None,
                ",".join(map(str, snapshots)),
                size,
            )
