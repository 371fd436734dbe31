"""The metadata view's `durable_bytes` is what `inspect` totals for the partition: the
files inside `snapshots/<V>/` count, a stray file in the root does not (store-level, no Spark)."""

from __future__ import annotations

import os

import partition_workload as wl
from spark_statestore.checkpoint.files import PartitionFiles
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import StateLocation
from pyspark.sql.datasource import InputPartition

from spark_statestore.spark.reader.metadata import MetadataReader


def test_durable_bytes_equal_inspects_total_with_snapshot_folders_and_strays(tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    os.makedirs(checkpoint)
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 1))
    wl.run(checkpoint, checkpoint + "-local", 2)
    state = StateLocation.open(checkpoint)
    durable = state.durable(0)
    before = sum(PartitionFiles.read(durable).totals().values())
    folder = durable.path("snapshots/1")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "000001.sst"), "wb") as f:
        f.write(b"s" * 4096)
    with open(durable.path("stray.txt"), "wb") as f:
        f.write(b"x" * 100_000)
    total = sum(PartitionFiles.read(durable).totals().values())
    rows = list(MetadataReader(state).read(InputPartition(0)))
    assert rows and {row[-1] for row in rows} == {total}
    assert total == before + 4096  # the snapshot folder's file counts, the stray does not
