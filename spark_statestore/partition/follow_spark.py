"""Keeping the state in step with Spark's own offline repartition (pyspark 4.2+), on the
driver, before a query's tasks run.

Spark's `StreamingCheckpointManager.repartition(checkpoint, n)` moves Spark's own state
and writes a batch of its own: offsets and commit N+1 with `spark.sql.shuffle.partitions`
= n, in which no task of the query runs. Both orders work with `rescale`:

* Spark's first: the rescale reads the state as of the newest version at or below that
  batch and starts the new generation at it (`rescale` does that by itself).
* ours first: the new generation starts at batch N, and Spark's batch N+1 leaves no
  version of ours. `follow_spark_batches` writes an empty changelog for each such batch
  (nothing of ours changed in it), so the restarted query opens version N+1.

`spark_partition_mismatch` says when Spark's checkpoint and the state disagree on the
partition count (one was moved, the other not), for the operators whose partitions are
Spark's state partitions.
"""

from __future__ import annotations

import os
import tempfile

import pyarrow.fs as pafs

from spark_statestore.checkpoint.changelog import ChangelogWriter, publish_changelog
from spark_statestore.checkpoint.changelog_header import ChangelogHeader
from spark_statestore.checkpoint.snapshots import read_manifest
from spark_statestore.partition.layout import Layout, read_query_layout
from spark_statestore.partition.reading import StateLocation
from spark_statestore.partition.spark_log import newest_planned_batch, oldest_planned_batch, spark_partitions


def follow_spark_batches(location: str, filesystem: pafs.FileSystem | None = None) -> list[int]:
    """Write an empty changelog, in every partition of the newest generation, for each
    batch Spark committed after the rescale without running the query (its own
    repartition); returns those batches. Nothing is written once a batch of the query ran
    in the generation, or before any rescale."""
    layout = read_query_layout(location, filesystem)
    if layout is None or not layout.generations:
        return []
    generation = layout.generation
    state = StateLocation(location, layout, filesystem, generation.number)
    committed = state.committed_batch()
    if committed is None or committed <= generation.base or generation.partitions is None:
        return []
    for partition in state.partitions:
        changelogs, snapshots = state.versions(partition)
        if any(v > generation.base for v in changelogs + snapshots):
            return []  # the query ran in this generation: its batches wrote their versions
    batches = list(range(generation.base + 1, committed + 1))
    stores = Layout(layout.stores, generation.partitions)
    with tempfile.TemporaryDirectory(prefix="statestore-follow-") as scratch:
        for partition in range(generation.partitions):
            durable = state.durable(partition)
            base_id = int(read_manifest(durable, generation.base).get("version_id", 0))
            for version in batches:
                header = ChangelogHeader(partition, version, version - 1, base_id, (), stores.as_dict())
                path = os.path.join(scratch, f"{partition}-{version}.changelog")
                with open(path, "wb") as out:
                    base_id = ChangelogWriter(out, header).finish()
                publish_changelog(durable, version, path, base_id, scratch)
    return batches


def spark_partition_mismatch(location: str, filesystem: pafs.FileSystem | None = None) -> tuple[int, int] | None:
    """(Spark's partition count, the state's) when they differ, else None. Spark's count
    is its offset log's newest; the state's is its layout's, or, before any rescale and
    without a fixed count, Spark's oldest kept offset entry's (the count the state grew
    under: a change since is Spark's repartition alone)."""
    newest = newest_planned_batch(location, filesystem)
    layout = read_query_layout(location, filesystem)
    if newest is None or layout is None:
        return None
    spark = spark_partitions(location, newest, filesystem)
    ours = layout.partitions
    if ours is None and not layout.generations:
        oldest = oldest_planned_batch(location, filesystem)
        ours = None if oldest is None else spark_partitions(location, oldest, filesystem)
    if spark is None or ours is None or spark == ours:
        return None
    return spark, ours
