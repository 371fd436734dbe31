"""Spark queries whose checkpoint location is `s3a://`: Spark's offsets, commits and own
state (Hadoop's S3A) and this library's state (pyarrow's S3) in one bucket of an S3 server
on loopback (moto), reached through a proxy that counts requests and injects faults.

Each adapter's job runs, its driver stops, every local copy of the state is lost and the
query restarts on a second "executor" (another local directory): the output equals the
batch reference, and the state was restored from the bucket. The classic session only
(the subject is the worker's side, which Spark Connect shares), on the newest pyspark
minor only (not `versioned`): one S3 server, proxy and session for the whole module.

The server is moto's, as in the store-level S3 tests: it is already a test dependency, starts
in the test process in under a second and serves every request S3A and pyarrow make here; its
one quirk with the AWS SDK v2 (an interim `100 Continue` taken for the answer) the proxy
removes, and the proxy is needed anyway to count requests and inject faults.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import boto3
import pandas as pd
import pytest
import spark_jobs
import test_spark_partitions as partitions
import test_spark_tws_row as row_tws
import windowed_reference
from conftest import NO_S3A_REASON, S3A_JARS
from s3_proxy import S3Proxy

from spark_statestore.spark import StateStoreMetrics, compat

pytestmark = [pytest.mark.spark, pytest.mark.s3a,
              pytest.mark.skipif(S3A_JARS is None, reason=NO_S3A_REASON or "no hadoop-aws")]
windowed_counts = spark_jobs.windowed_counts

HADOOP_S3A = {  # what a user sets for an S3-compatible server (path-style, plain HTTP)
    "fs.s3a.path.style.access": "true",
    "fs.s3a.connection.ssl.enabled": "false",
    "fs.s3a.access.key": "testing",
    "fs.s3a.secret.key": "testing",
    "fs.s3a.endpoint.region": "us-east-1",
    # Spark's RocksDB provider closes the cached S3A filesystem it shares with the query's
    # logs: the next commit then fails in S3AFileSystem.getStore() (NullPointerException)
    "fs.s3a.impl.disable.cache": "true",
}


@pytest.fixture
def proxy(s3_proxy):
    return s3_proxy


@pytest.fixture
def s3a(classic_spark, proxy, tmp_path):
    """A bucket of its own, the session's S3A keys pointing at the proxy; yields the
    query's `s3a://` checkpoint location."""
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}").create_bucket(Bucket=bucket)
    # set on the running session: Spark hands `fs.s3a.*` keys to Hadoop as they are
    settings = {**HADOOP_S3A, "fs.s3a.endpoint": f"http://{proxy.endpoint}"}
    settings["spark.statestore.localDir"] = str(tmp_path / "executor-1")
    settings["spark.statestore.snapshotInterval"] = "3"
    for key, value in settings.items():
        classic_spark.conf.set(key, value)
    yield f"s3a://{bucket}/query"
    for key in settings:
        classic_spark.conf.unset(key)


def second_executor(spark, tmp_path) -> None:
    """Every local copy is lost; the next run's tasks keep theirs in another directory."""
    partitions.lose_local_state_at(tmp_path / "executor-1")
    spark.conf.set("spark.statestore.localDir", str(tmp_path / "executor-2"))


def local_copy(proxy: S3Proxy, location: str, where) -> str:
    """The objects under `location` downloaded into `where` (for the batch references,
    which read the query's logs as files); returns the local checkpoint's path."""
    bucket, prefix = location.removeprefix("s3a://").split("/", 1)
    s3 = boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            if item["Key"].endswith("/"):
                continue  # S3A's directory markers
            path = os.path.join(str(where), item["Key"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            s3.download_file(bucket, item["Key"], path)
    return os.path.join(str(where), prefix)


def restored(location: str, query) -> int:
    """Partitions the query's tasks restored from the bucket (the metrics, read from S3)."""
    tasks = StateStoreMetrics(location).tasks()
    return int(tasks[tasks["query_id"] == str(query.id)]["restored"].sum())


def test_windowed_counts_on_s3a_equal_the_reference_after_a_restart_on_a_new_executor(classic_spark, s3a, proxy, tmp_path):
    spark, job = classic_spark, str(tmp_path / "job")
    inputs = os.path.join(job, "input")

    def run():
        processor = windowed_counts.WindowedCounts(s3a)  # a new driver each run
        query = windowed_counts.build_query(spark, job, processor, {"availableNow": True}, checkpoint=s3a)
        spark_jobs.finished(spark, query)
        return query

    windowed_counts.generate(inputs, 4, 120, keys=6)
    run()
    second_executor(spark, tmp_path)
    windowed_counts.generate(inputs, 4, 120, keys=6, start=4)
    query = run()
    assert query.recentProgress[0]["batchId"] > 0  # it carried on from the bucket's commits
    expected = windowed_reference.reference(local_copy(proxy, s3a, tmp_path / "copy"))
    assert len(expected) > 20
    difference = windowed_reference.compare(pd.read_parquet(os.path.join(job, "output")), expected)
    assert difference is None, difference
    assert restored(s3a, query) > 0
    check_tools(s3a, proxy, tmp_path)


def check_tools(location: str, proxy: S3Proxy, tmp_path) -> None:
    """The CLI on the stopped query's `s3a://` location (endpoint from the AWS environment)."""
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://{proxy.endpoint}", "PYTHONPATH": os.getcwd()}

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "spark_statestore", *args], capture_output=True, text=True, check=False,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    inspected = json.loads(cli("inspect", location, "--json"))
    assert [p["partition"] for p in inspected["partitions"]] == [0, 1], inspected
    verified = json.loads(cli("verify", location, "--json"))
    assert verified["ok"], verified
    records = cli("read", location, "--store", "tumbling")
    assert records.count("\n") > 2
    rescaled = json.loads(cli("rescale", location, "3", "--json"))
    assert rescaled["partitions"] == 3, rescaled
    assert json.loads(cli("verify", location, "--json"))["ok"]
    moved = cli("read", location, "--store", "tumbling")  # the same records, from 3 partitions
    assert sorted(moved.splitlines()[1:]) == sorted(records.splitlines()[1:])


ADAPTERS = {  # an adapter's job and the check of its output against the batch reference
    "applyInPandasWithState": (partitions.run_group_totals, partitions.check_group_totals),
    "partition_function": (partitions.run_partition_totals, partitions.check_change_stream),
    "transformWithState": (row_tws.run_row_totals, row_tws.check_row_totals),  # StoreProcessor over Rows
}
NO_ROW_TWS = pytest.mark.skipif(not compat.FACTS.row_transform_with_state,
                                reason=f"pyspark {compat.VERSION} has no Row-based transformWithState")


@pytest.mark.parametrize("adapter", [pytest.param(a, marks=NO_ROW_TWS) if a == "transformWithState" else a
                                     for a in sorted(ADAPTERS)])
def test_an_adapter_on_s3a_is_exactly_once_after_a_restart_on_a_new_executor(classic_spark, s3a, proxy, tmp_path, adapter):
    run, check = ADAPTERS[adapter]
    spark, job = classic_spark, str(tmp_path / "job")
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 3, 80, keys=6)
    run(spark, job, checkpoint=s3a)
    second_executor(spark, tmp_path)
    windowed_counts.generate(inputs, 3, 80, keys=6, start=3)
    _, query = run(spark, job, checkpoint=s3a)
    check(job, checkpoint=local_copy(proxy, s3a, tmp_path / "copy"))
    assert restored(s3a, query) > 0


def test_a_query_on_s3a_rides_out_throttling_errors_and_cut_responses(classic_spark, s3a, proxy, tmp_path):
    """503 SlowDown, 500 and responses cut mid-body between the tasks and the store (the
    requests for the state), through a restore from the bucket: each retried, and the output
    is still exactly once."""
    spark, job = classic_spark, str(tmp_path / "job")
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 2, 80, keys=6)
    partitions.run_partition_totals(spark, job, checkpoint=s3a)
    second_executor(spark, tmp_path)  # the next run restores from the bucket, through the faults
    windowed_counts.generate(inputs, 2, 80, keys=6, start=2)
    before = dict(proxy.injected)
    proxy.faults.area = "statestore"  # this library's requests (Spark's S3A has retries of its own)
    proxy.faults.errors.extend([503, 500, 503, 500])
    proxy.faults.cut = 3
    try:
        partitions.run_partition_totals(spark, job, checkpoint=s3a)
    finally:
        proxy.faults.errors.clear()
        proxy.faults.cut = 0
        proxy.faults.area = None
    injected = {k: n - before.get(k, 0) for k, n in proxy.injected.items()}
    assert injected.get(503) == 2 and injected.get(500) == 2 and injected.get("cut") == 3, injected
    partitions.check_change_stream(job, checkpoint=local_copy(proxy, s3a, tmp_path / "copy"))


def test_a_store_stopped_mid_batch_fails_the_task_naming_the_location_and_the_restarted_query_is_exactly_once(
        classic_spark, s3a, proxy, tmp_path):
    """The store stops when a task publishes its changelog (the proxy stops at that PUT):
    each attempt of the task fails after its retries with an error naming a file under the
    location, Spark gives up on the query, and once the store is back the restarted
    query carries on from the bucket, exactly once."""
    from pyspark.errors import StreamingQueryException

    spark, job = classic_spark, str(tmp_path / "job")
    inputs = os.path.join(job, "input")
    windowed_counts.generate(inputs, 2, 80, keys=6)
    partitions.run_partition_totals(spark, job, checkpoint=s3a)
    windowed_counts.generate(inputs, 2, 80, keys=6, start=2)
    proxy.stopped.clear()
    proxy.faults.stop_at = lambda kind, path: kind == "PUT" and path.endswith(".changelog")
    try:
        with pytest.raises(StreamingQueryException) as failed:
            partitions.run_partition_totals(spark, job, checkpoint=s3a)
        assert proxy.stopped.is_set()
    finally:
        proxy.faults.stop_at = None
        if not proxy.running:
            proxy.start()
    where = s3a.replace("s3a://", "s3://")
    # the last attempt's error: each attempt fails at its first request (the layout, a lookup, the PUT)
    assert re.search(rf"StoreUnreachableError: {re.escape(where)}/statestore/\S+: [a-z ]+ failed \d+ times",
                     str(failed.value)), str(failed.value)[-3000:]
    partitions.run_partition_totals(spark, job, checkpoint=s3a)
    partitions.check_change_stream(job, checkpoint=local_copy(proxy, s3a, tmp_path / "copy"))
