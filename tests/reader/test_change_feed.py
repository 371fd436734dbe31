"""The change feed without Spark: the stream of committed changes discovers a writer's
partitions as they appear (a reader made before every partition published its first
changelog still delivers every committed change of every partition, exactly once; the
stream reader is driven as Spark drives it: latestOffset, partitions, read, commit), and
a damaged changelog is named by its durable file and partition."""

from __future__ import annotations

import os

import pytest

import pyspark.sql.types as T

import partition_workload as wl
from spark_statestore.errors import CorruptStateError
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import StateLocation, changes
from spark_statestore.spark.reader.request import ReadRequest
from spark_statestore.spark.reader.stream import ChangeStreamReader


def _batch(checkpoint: str, local: str, partition: int, batch: int) -> None:
    state = wl.partition_state(checkpoint, os.path.join(local, str(partition)), partition)
    state.open(batch)
    state.store("kv").put(b"p%d-b%d" % (partition, batch), b"x")
    state.prepare()
    state.close()


def _deliver(reader: ChangeStreamReader, start: dict) -> tuple[dict, list]:
    end = reader.latestOffset()
    batches = [batch for part in reader.partitions(start, end) for batch in reader.read(part)]
    rows = [tuple(row.values()) for batch in batches for row in batch.to_pylist()]
    reader.commit(end)
    return end, rows


def test_partitions_that_publish_after_the_reader_started_are_read(dirs, tmp_path):
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 2))
    _batch(checkpoint, local, 0, 0)  # partition 1 has not published anything yet
    reader = ChangeStreamReader(ReadRequest.of({"checkpointLocation": checkpoint, "store": "kv"}), T.StructType())
    offset, rows = _deliver(reader, reader.initialOffset())
    assert rows == []  # nothing committed yet
    _batch(checkpoint, local, 1, 0)
    wl.spark_commit(checkpoint, 0)
    for batch in (1, 2):
        for partition in (0, 1):
            _batch(checkpoint, local, partition, batch)
        wl.spark_commit(checkpoint, batch)
    offset, rows = _deliver(reader, offset)
    delivered = sorted((row[0], row[1], row[3]) for row in rows)
    assert delivered == [(b, p, b"p%d-b%d" % (p, b)) for b in range(3) for p in (0, 1)]
    again = ChangeStreamReader(ReadRequest.of({"checkpointLocation": checkpoint, "store": "kv"}), T.StructType())
    assert _deliver(again, offset)[1] == []  # a restarted reader at the stored offset: nothing twice


def test_a_damaged_changelog_is_named_by_its_durable_file_and_partition(dirs, tmp_path):
    checkpoint, local = dirs
    record_query_layout(checkpoint, Layout.of(wl.SPECS, 2))
    for batch in range(3):
        for partition in (0, 1):
            _batch(checkpoint, local, partition, batch)
        wl.spark_commit(checkpoint, batch)
    durable = os.path.join(checkpoint, "statestore", "1", "1.changelog")
    with open(durable, "r+b") as f:
        f.seek(os.path.getsize(durable) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    location = StateLocation.open(checkpoint)
    assert [c.key for c in changes(location, 0, location.store("kv"), 0, 2)] == [b"p0-b0", b"p0-b1", b"p0-b2"]
    with pytest.raises(CorruptStateError) as raised:
        list(changes(location, 1, location.store("kv"), 0, 2, workdir=str(tmp_path)))
    message = str(raised.value)
    assert durable in message and "of partition 1" in message and "(version 1)" in message, message
    assert "statestore-changes" not in message, message
