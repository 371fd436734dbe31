"""The change feed across a value schema migration (`Serdes.record(..., migrate=)`), read
from outside the query, which has no `migrate` function: the command line shows each
batch's changes in the shape of that batch; the Spark reader (one value column, one shape)
refuses a range or a stream that spans the migration up front, naming the store, the
migration's batch and what to read instead, and reads either side of it."""

from __future__ import annotations

import dataclasses
import io
import json
import os

import migration_workload as wl
import pytest
from pyspark.sql.datasource import InputPartition

from spark_statestore.spark.reader.changes import ChangeFeedReader
from spark_statestore.spark.reader.columns import change_schema
from spark_statestore.spark.reader.request import ReadRequest
from spark_statestore.spark.reader.stream import ChangeStreamReader
from spark_statestore.tools.cli import main


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """Batches 0..2 in the old shape, the migration in batch 3, batch 4 after it."""
    root = tmp_path_factory.mktemp("migrated")
    checkpoint = str(root / "ckpt")
    os.makedirs(checkpoint)
    wl.run(checkpoint, str(root / "local"), "v1")
    wl.run(checkpoint, str(root / "local"), "v2")
    return checkpoint


def _changed(batch: int) -> dict:
    """The model's final value of each key batch `batch` wrote (the migration's batch: all)."""
    after = wl.expected(batch)
    keys = after if batch == wl.V1_BATCHES else set(wl.batch_keys(batch))
    return {k: dataclasses.asdict(after[k]) for k in keys}


def test_the_command_line_shows_each_batch_in_its_own_shape(migrated, capsys):
    out = io.StringIO()
    code = main(["read", migrated, "--changes", "--start", "1", "--end", "4", "--format", "json"], out)
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    for batch in range(1, 5):
        assert {r["key"]: r["value"] for r in rows if r["batch_id"] == batch} == _changed(batch), batch
    assert {r["change"] for r in rows} == {"put"}


def _feed(checkpoint: str, **options) -> ChangeFeedReader:
    request = ReadRequest.of({"checkpointLocation": checkpoint, "readChangeFeed": "true", **options})
    return ChangeFeedReader(request, change_schema(request.spec))


def _rows(reader) -> dict:
    return {(r["batch_id"], r["key"]): r["value"] for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()}


def test_a_batch_read_across_the_migration_is_refused_up_front_and_either_side_reads(migrated):
    with pytest.raises(ValueError) as raised:
        _feed(migrated, changeStartBatchId="1", changeEndBatchId="4")
    message = str(raised.value)
    for part in ("store 'totals'", "migration of its value schema in batch 3", "read batches 1..2 and 3..4 apart"):
        assert part in message, message
    with pytest.raises(ValueError, match="in batch 3"):
        _feed(migrated, changeStartBatchId="0")  # to the newest committed batch
    before = _rows(_feed(migrated, changeStartBatchId="1", changeEndBatchId="2"))
    after = _rows(_feed(migrated, changeStartBatchId="3"))
    assert before == {(b, k): v for b in (1, 2) for k, v in _changed(b).items()}
    assert after == {(b, k): v for b in (3, 4) for k, v in _changed(b).items()}


def test_changes_before_a_migration_declared_for_the_next_batch_read_in_their_shape(tmp_path):
    """The query restarted with `migrate=` (recorded to take effect in batch 3) and batch 3
    has not committed: the change feed to the newest committed batch is all old shape."""
    checkpoint = str(tmp_path / "ckpt")
    os.makedirs(checkpoint)
    wl.run(checkpoint, str(tmp_path / "local"), "v1")
    wl.driver(checkpoint, "v2")
    rows = _rows(_feed(checkpoint, changeStartBatchId="0"))
    assert rows == {(b, k): v for b in range(3) for k, v in _changed(b).items()}


def _stream(checkpoint: str, **options) -> ChangeStreamReader:
    request = ReadRequest.of({"checkpointLocation": checkpoint, "readChangeFeed": "true", **options})
    return ChangeStreamReader(request, change_schema(request.spec))


def test_a_stream_across_the_migration_is_refused_naming_what_to_read(migrated):
    stream = _stream(migrated)
    with pytest.raises(ValueError) as raised:
        stream.partitions(stream.initialOffset(), stream.latestOffset())
    assert "span a migration of its value schema in batch 3" in str(raised.value)
    with pytest.raises(ValueError) as raised:
        stream.partitions({"batch": 0}, {"batch": 2})
    message = str(raised.value)
    assert "batches 1..2 predate it" in message and "startingBatchId 3" in message, message
    stream = _stream(migrated, startingBatchId="3")
    rows = {(r["batch_id"], r["key"]): r["value"]
            for p in stream.partitions(stream.initialOffset(), stream.latestOffset())
            for b in stream.read(p) for r in b.to_pylist()}  # fmt: skip
    assert rows == {(b, k): v for b in (3, 4) for k, v in _changed(b).items()}


def test_a_stream_started_before_the_migration_asks_to_be_restarted(tmp_path):
    checkpoint, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    os.makedirs(checkpoint)
    wl.run(checkpoint, local, "v1")
    stream = _stream(checkpoint)
    assert stream.partitions({"batch": -1}, {"batch": 2})  # the old shape: readable
    wl.run(checkpoint, local, "v2")
    with pytest.raises(ValueError) as raised:
        stream.partitions({"batch": 2}, stream.latestOffset())
    message = str(raised.value)
    assert "store 'totals'" in message and "migrated in batch 3, after this stream started" in message, message
    assert "restart the stream" in message
    restarted = _stream(checkpoint)
    assert [p.value for p in restarted.partitions({"batch": 2}, restarted.latestOffset())] == [(0, 3, 4)]
