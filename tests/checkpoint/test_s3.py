"""Partition state on S3, for real: an S3-compatible server (moto) on loopback."""

from __future__ import annotations

import uuid

import boto3
import partition_workload as wl
import pyarrow.fs as pafs
import pytest

from spark_statestore import MissingStateError
from spark_statestore.checkpoint.files import snapshot_versions
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources


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


# -- settings from Spark's S3A keys, and faults between the workers and the store ----------


@pytest.fixture
def proxy(s3_proxy):
    return s3_proxy


@pytest.fixture
def through_proxy(proxy, monkeypatch):
    """s3a:// locations of this process reach the store through the proxy, as the session's
    `fs.s3a.*` keys say (no AWS_ENDPOINT_URL), trying each request 3 times."""
    from spark_statestore.checkpoint import object_store

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    conf = {"spark.hadoop.fs.s3a.endpoint": f"http://{proxy.endpoint}", "fs.s3a.attempts.maximum": "3"}
    object_store.use(object_store.S3Settings.from_conf(conf.get))
    yield proxy
    object_store.use(None)
    proxy.faults.errors.clear()
    proxy.faults.cut = 0
    if not proxy.running:
        proxy.start()


def _batch(location: str, local: str, batch: int, key: bytes | None = None) -> PartitionState:
    """Batch `batch` of one key-value store: puts key `k<batch>` (or `key`)."""
    state = PartitionState(location, 0, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(batch)
    state.store("kv").put(key or b"k%d" % batch, b"%d" % batch)
    state.prepare()
    state.close()
    return state


def _read_all(location: str, local: str, batch: int) -> dict[bytes, bytes]:
    state = PartitionState(location, 0, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(batch)
    try:
        return dict(state.store("kv").all())
    finally:
        state.close()


def test_s3a_locations_are_reached_as_the_sessions_s3a_keys_say(through_proxy, proxy, tmp_path):
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}").create_bucket(Bucket=bucket)
    location = f"s3a://{bucket}/query"
    _batch(location, str(tmp_path / "a"), 0)
    assert _read_all(location, str(tmp_path / "b"), 1) == {b"k0": b"0"}
    assert proxy.snapshot()["PUT"] > 0  # through the proxy, as the keys said


@pytest.mark.parametrize("key,value,named", [
    ("spark.hadoop.fs.s3a.connection.ssl.enabled", "yes", "fs.s3a.connection.ssl.enabled"),
    ("fs.s3a.attempts.maximum", "0", "fs.s3a.attempts.maximum"),
    ("spark.hadoop.fs.s3a.attempts.maximum", "many", "fs.s3a.attempts.maximum"),
    ("fs.s3a.attempts.maximum", "\u0663", "fs.s3a.attempts.maximum"),  # ARABIC-INDIC DIGIT THREE
    ("spark.hadoop.fs.s3a.endpoint", "ftp://host:1", "fs.s3a.endpoint"),
])
def test_bad_s3a_keys_are_named_with_their_value(key, value, named):
    from spark_statestore.checkpoint.object_store import S3Settings

    with pytest.raises(ValueError, match=rf"{named} must .*got {value!r}"):
        S3Settings.from_conf({key: value}.get)


def test_the_secret_is_never_shown():
    from spark_statestore.checkpoint.object_store import S3Settings

    settings = S3Settings.from_conf({"fs.s3a.secret.key": "hunter2", "fs.s3a.access.key": "AKIA"}.get)
    assert settings.secret_key == "hunter2" and "hunter2" not in repr(settings)


@pytest.fixture
def s3a_location(through_proxy, proxy):
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}").create_bucket(Bucket=bucket)
    return f"s3a://{bucket}/query"


def test_throttling_and_errors_are_retried_a_bounded_number_of_times_each_logged(s3a_location, proxy, tmp_path, caplog):
    from spark_statestore.errors import StoreUnreachableError

    _batch(s3a_location, str(tmp_path / "local"), 0)
    proxy.faults.errors.extend([503, 500])  # two failures, then the store answers
    with caplog.at_level("WARNING", logger="spark_statestore.checkpoint.filesystem"):
        _batch(s3a_location, str(tmp_path / "local"), 1)
    retries = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(retries) == 2 and all(s3a_location.replace("s3a://", "s3://") in m for m in retries), retries
    proxy.faults.errors.extend([503] * 3)  # as many as the attempts: the task fails, naming the file
    with pytest.raises(StoreUnreachableError, match=r"s3://ckpt-\w+/query/statestore/\S+: \w+ failed 3 times"):
        _batch(s3a_location, str(tmp_path / "local"), 2)
    assert not proxy.faults.errors
    assert _read_all(s3a_location, str(tmp_path / "new"), 2) == {b"k0": b"0", b"k1": b"1"}  # nothing lost


def test_a_store_stopped_mid_batch_fails_the_task_naming_the_location_and_the_retry_recovers(s3a_location, proxy, tmp_path):
    from spark_statestore.errors import StoreUnreachableError

    local = str(tmp_path / "local")
    _batch(s3a_location, local, 0)
    state = PartitionState(s3a_location, 0, [StoreSpec.key_value("kv")], WorkerResources(local))
    state.open(1)
    state.store("kv").put(b"k1", b"1")
    proxy.stop()  # the store goes away mid-batch: the changelog cannot be published
    with pytest.raises(StoreUnreachableError, match=r"s3://ckpt-\w+/query/\S+: [a-z ]+ failed 3 times"):
        state.prepare()
    state.close()
    proxy.start()  # back: Spark's next attempt of the batch runs on another executor
    _batch(s3a_location, str(tmp_path / "other"), 1)
    assert _read_all(s3a_location, str(tmp_path / "new"), 2) == {b"k0": b"0", b"k1": b"1"}


def test_a_response_cut_mid_body_is_read_again_not_taken_for_the_file(s3a_location, proxy, tmp_path, caplog):
    for batch in range(3):
        _batch(s3a_location, str(tmp_path / "local"), batch)
    proxy.faults.cut = 2  # the restore's first two reads with a body end half way
    with caplog.at_level("WARNING", logger="spark_statestore.checkpoint.filesystem"):
        assert _read_all(s3a_location, str(tmp_path / "new"), 3) == {b"k0": b"0", b"k1": b"1", b"k2": b"2"}
    assert proxy.faults.cut == 0 and proxy.injected["cut"] >= 2
    assert sum("failed (attempt" in r.getMessage() for r in caplog.records) >= 2


def test_a_batch_on_an_object_store_asks_nothing_after_its_put(s3a_location, proxy, tmp_path):
    """The changelog's PUT either stored every byte or failed: a HEAD after it to learn the
    size would be one request per batch and partition for nothing."""
    for batch in range(2):
        _batch(s3a_location, str(tmp_path / "local"), batch)
    proxy.reset_counts()
    state = _batch(s3a_location, str(tmp_path / "local"), 2, key=b"x" * 100)
    requests, log = proxy.snapshot(), list(proxy.log)
    assert requests["PUT"] == 1 and requests.get("POST", 0) == 0, requests  # one PUT, no multipart upload
    changelog = f"/{s3a_location.removeprefix('s3a://')}/statestore/0/2.changelog"
    put = log.index(("PUT", changelog))
    assert [r for r in log[put + 1:] if r[1] == changelog] == [], log
    assert state.metrics.changelog_bytes == pafs.S3FileSystem(endpoint_override=proxy.endpoint, scheme="http").get_file_info(
        changelog.lstrip("/")).size


def test_an_s3a_location_without_a_bucket_is_named_as_given():
    from spark_statestore.checkpoint.filesystem import resolve_location

    with pytest.raises(ValueError, match=r"checkpoint location 's3a:///query' names no bucket"):
        resolve_location("s3a:///query")


def test_a_warm_batch_costs_one_listing_and_no_existence_check_of_two_requests(s3a_location, proxy, tmp_path):
    """A batch on the executor that ran the one before: the local copy is at the version
    the batch builds on, so its open lists the partition's folder once (not `snapshots/`:
    no snapshot is needed) and reads the previous changelog's trailer (a HEAD for its size,
    then a ranged GET: is it the very file the copy has?); the commit check and the check
    for an earlier attempt's changelog are one HEAD each (pyarrow's `get_file_info` adds a
    LIST when the key is missing); then the changelog's PUT. The query has no layout file
    (a HEAD that answers 404)."""
    local = str(tmp_path / "local")
    for batch in range(3):
        _batch(s3a_location, local, batch)
    proxy.reset_counts()
    _batch(s3a_location, local, 3)
    requests = {kind: n for kind, n in proxy.snapshot().items() if not kind.startswith("bytes")}
    assert requests == {"HEAD": 4, "LIST": 1, "GET": 1, "PUT": 1}, proxy.log


def test_per_bucket_s3a_keys_win_for_their_bucket_only():
    """S3A's `fs.s3a.bucket.<bucket>.<key>` overrides `fs.s3a.<key>` for that bucket (a
    bucket name may hold dots); other buckets keep the general keys."""
    from spark_statestore.checkpoint.object_store import S3Settings

    conf = {
        "spark.hadoop.fs.s3a.endpoint": "general:1",
        "spark.hadoop.fs.s3a.attempts.maximum": "4",
        "spark.hadoop.fs.s3a.bucket.logs.v2.endpoint": "http://logs:2",
        "fs.s3a.bucket.logs.v2.endpoint.region": "eu-west-1",  # a running session's key
        "spark.hadoop.fs.s3a.bucket.other.access.key": "AKIA",
    }
    settings = S3Settings.from_conf(conf.get, conf)
    logs = settings.for_bucket("logs.v2")
    assert (logs.endpoint, logs.scheme, logs.region, logs.attempts) == ("logs:2", "http", "eu-west-1", 4)
    assert settings.for_bucket("other").access_key == "AKIA" and settings.for_bucket("other").endpoint == "general:1"
    assert settings.for_bucket("elsewhere") == settings and settings.endpoint == "general:1"
    with pytest.raises(ValueError, match=r"fs\.s3a\.bucket\.b\.attempts\.maximum must .*got 'x'"):
        S3Settings.from_conf({"fs.s3a.bucket.b.attempts.maximum": "x"}.get, ["fs.s3a.bucket.b.attempts.maximum"])


def test_a_bucket_is_reached_at_its_per_bucket_endpoint(proxy, monkeypatch, tmp_path):
    """The general endpoint refuses connections; the bucket's own endpoint is the store."""
    from spark_statestore.checkpoint import object_store

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}.v1"
    boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}").create_bucket(Bucket=bucket)
    conf = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9", "fs.s3a.attempts.maximum": "1",
            f"fs.s3a.bucket.{bucket}.endpoint": f"http://{proxy.endpoint}", f"fs.s3a.bucket.{bucket}.attempts.maximum": "2"}
    object_store.use(object_store.S3Settings.from_conf(conf.get, conf))
    try:
        location = f"s3a://{bucket}/query"
        _batch(location, str(tmp_path / "a"), 0)
        proxy.faults.errors.append(503)  # retried: the bucket's 2 attempts, not the general 1
        assert _read_all(location, str(tmp_path / "b"), 1) == {b"k0": b"0"}
    finally:
        object_store.use(None)
        proxy.faults.errors.clear()


def test_the_drivers_metrics_of_a_batch_read_the_layout_once_and_nothing_when_no_batch_is_new(s3a_location, proxy, tmp_path):
    """What the driver's batch log reads per batch on an object store: the query's layout
    once (it was read twice: HEAD+GET each time), and when no batch committed since the
    last one logged, neither the partitions' folders nor the driver's facts are listed."""
    from spark_statestore.partition.layout import Layout, record_query_layout
    from spark_statestore.partition.stats import PartitionMetrics
    from spark_statestore.spark.driver.metrics import StateStoreMetrics
    from spark_statestore.spark.task_metrics import TaskMetrics

    record_query_layout(s3a_location, Layout.of([StoreSpec.key_value("kv")], None))
    s3 = boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}")
    bucket, prefix = s3a_location.removeprefix("s3a://").split("/", 1)
    for batch in range(2):
        state = PartitionState(s3a_location, 0, [StoreSpec.key_value("kv")], WorkerResources(str(tmp_path / "l")))
        state.open(batch)
        state.store("kv").put(b"k", b"%d" % batch)
        state.prepare()
        state.keep_metrics(TaskMetrics.of(PartitionMetrics(), query_id="q", batch_id=batch, partition=0,
                                          task_attempt_id=batch).as_dict())
        state.close()
        s3.put_object(Bucket=bucket, Key=f"{prefix}/commits/{batch}", Body=b"v1\n{}\n")
    metrics = StateStoreMetrics(s3a_location)
    proxy.reset_counts()
    assert [r["batch_id"] for r in metrics.task_records(20, after=0)] == [1]
    layout_reads = [r for r in proxy.log if r[1].endswith("/statestore/_layout")]
    assert layout_reads == [("HEAD", f"/{bucket}/{prefix}/statestore/_layout"), ("GET", f"/{bucket}/{prefix}/statestore/_layout")]
    proxy.reset_counts()
    assert metrics.batches(20, after=1) == []
    listed = [path for kind, path in proxy.log if kind == "LIST"]
    assert not any("statestore/" in path for path in listed), proxy.log
    proxy.reset_counts()  # following a query run (the batch log's progress events): its layout is read once
    for _ in range(2):
        assert [s["batch_id"] for s in metrics.batches(20, after=0, run="run-1")] == [1]
    assert [r for r in proxy.log if r[1].endswith("/statestore/_layout")] == layout_reads


def test_the_tasks_of_a_query_run_read_its_layout_once(s3a_location, proxy, tmp_path):
    """The layout file (a HEAD and a GET) is read by the first task of a query run in a
    process, not by every batch and partition: only a rescale replaces it, and a rescale
    runs while the query is stopped (a new run reads it again)."""
    from spark_statestore.partition.layout import Layout, record_query_layout

    record_query_layout(s3a_location, Layout.of([StoreSpec.key_value("kv")], None))
    layout = f"/{s3a_location.removeprefix('s3a://')}/statestore/_layout"

    def batch(run: str, batch: int) -> None:
        state = PartitionState(s3a_location, 0, [StoreSpec.key_value("kv")], WorkerResources(str(tmp_path / "l")),
                               query_run=run)
        state.open(batch)
        state.store("kv").put(b"k", b"%d" % batch)
        state.prepare()
        state.close()

    proxy.reset_counts()
    for n in range(3):
        batch("run-1", n)
    assert [kind for kind, path in proxy.log if path == layout] == ["HEAD", "GET"]
    proxy.reset_counts()
    batch("run-2", 3)  # a restarted query
    assert [kind for kind, path in proxy.log if path == layout] == ["HEAD", "GET"]
