"""Partition state on S3, for real: an S3-compatible server (moto) on loopback."""

from __future__ import annotations


import boto3
import pyarrow.fs as pafs
import pytest

import partition_workload as wl
from spark_statestore import MissingStateError
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources
from spark_statestore.checkpoint.files import snapshot_versions


def location(s3_endpoint, bucket):
    return f"s3://{bucket}/query?endpoint_override={s3_endpoint}&scheme=http"


def test_partition_state_on_s3(s3_endpoint, bucket, tmp_path):
    checkpoint = location(s3_endpoint, bucket)
    local = str(tmp_path / "local")
    for batch in range(10):
        state = wl.partition_state(checkpoint, local, snapshot_interval=3, min_batches_to_retain=4)
        state.open(batch)
        wl.apply_ops(wl.batch_ops(1, batch), state.store("kv"), state.store("win"))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http")
    root = f"{bucket}/query/statestore/0"
    names = {i.base_name for i in fs.get_file_info(pafs.FileSelector(root, recursive=False))}
    assert {"9.changelog", "snapshots", "sst"} <= names
    assert snapshot_versions(state.durable) == [5, 8]
    # the same local copy, and a new executor restoring from S3 (snapshot 8 + changelog 9)
    for where in (local, str(tmp_path / "new-executor")):
        state = wl.partition_state(checkpoint, where)
        state.open(10)
        assert wl.state_of(state.store("kv"), state.store("win")) == wl.expected(1, 9)
        state.close()
    assert state.metrics.restored and state.metrics.changelogs_applied == 1


def _kv_batches(checkpoint: str, partition: int, local: str, batches: int) -> list[StoreSpec]:
    """Batches 0..batches-1 of one key-value store on `partition` (no snapshot); its specs."""
    specs = [StoreSpec.key_value("kv")]
    for batch in range(batches):
        options = PartitionOptions(snapshot_interval=100)
        state = PartitionState(checkpoint, partition, specs, WorkerResources(local), options)
        state.open(batch)
        state.store("kv").put(b"n", b"%d" % batch)
        state.prepare()
        state.close()
    return specs


def _fresh_after_crafting(s3_endpoint, bucket, tmp_path, partition: int, batches: int, key: str, body: bytes):
    """A partition of `batches` batches on S3 with the object `key` crafted under the
    query's prefix, and a PartitionState that restores it on a fresh local directory."""
    checkpoint = location(s3_endpoint, bucket)
    specs = _kv_batches(checkpoint, partition, str(tmp_path / "local"), batches)
    boto3.client("s3", endpoint_url=f"http://{s3_endpoint}").put_object(Bucket=bucket, Key=f"query/{key}", Body=body)
    return PartitionState(checkpoint, partition, specs, WorkerResources(str(tmp_path / "fresh")))


def test_damaged_s3_changelog_is_named(s3_endpoint, bucket, tmp_path):
    state = _fresh_after_crafting(s3_endpoint, bucket, tmp_path, 7, 3, "statestore/7/1.changelog", b"not a changelog")
    with pytest.raises(MissingStateError, match=rf"s3://{bucket}/query/statestore/7/1\.changelog \(version 1\)"):
        state.open(3)


def test_endpoint_from_the_environment(s3_endpoint, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3_endpoint}")
    checkpoint = f"s3a://{bucket}/query"  # Hadoop's scheme, as Spark users write it
    state = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(str(tmp_path / "l")))
    state.open(0)
    state.store("kv").put(b"k", b"v")
    state.prepare()
    state.close()
    fresh = PartitionState(checkpoint, 0, [StoreSpec.key_value("kv")], WorkerResources(str(tmp_path / "m")))
    fresh.open(1)
    assert fresh.store("kv").get(b"k") == b"v"
    fresh.close()


def test_a_changelog_name_that_is_a_directory_on_s3_is_named_not_missing(s3_endpoint, bucket, tmp_path):
    """On an object store a "directory" is a prefix: an object under `2.changelog/` makes the
    changelog's name one, which a restore names instead of taking the changelog for not kept."""
    from spark_statestore.checkpoint.filesystem import NotAFileError

    state = _fresh_after_crafting(s3_endpoint, bucket, tmp_path, 3, 2, "statestore/3/2.changelog/stray", b"x")
    with pytest.raises(NotAFileError, match=rf"s3://{bucket}/query/statestore/3/2\.changelog is a directory"):
        state.open(2)
