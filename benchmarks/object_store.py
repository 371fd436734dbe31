"""What a batch costs on an object store: this library's state against Spark's own RocksDB
state store provider (changelog checkpointing on, as Spark recommends), side by side.

One S3 server on loopback (moto) behind the tests' proxy (tests/support/s3_proxy.py), which counts
every request by kind and the part of the checkpoint it is about, and adds latency. The same
stateful query (a running count per key over the same input files, `--partitions` shuffle
partitions) runs twice with its checkpoint on `s3a://`: once with a spark_statestore
key-value store in a partition function, once as Spark's `groupBy(key).count()` on Spark's
RocksDB provider. Reported:

1. object-store requests per batch and partition of each one's state (PUT/GET/LIST/DELETE/
   HEAD, bytes up and down): this library's under `statestore/`, Spark's under `state/`
   (Spark's own offsets and commits, which both pay, are left out);
2. batch duration with `--latency-ms` (50) added to every request (the median of the batches);
3. restore time of partition 0 whose local copy is lost, at `--keys` keys (comma-separated),
   with 1 and `snapshotInterval - 1` changelogs to apply on top of the newest snapshot (the
   most either library lets pile up: the snapshot `snapshotInterval` batches behind the
   batch that restores), for both (Spark's: a provider of the query's partition 0 on the
   driver, with a new local directory, loading the version), each against boto3 alone
   downloading exactly the objects that restore read (one after another, whole).

The last line: `headline: Spark provider / spark_statestore object-store requests per batch = x`.

    ./dev bench object_store [--batches 8] [--keys 1000000] [--no-requests]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "examples"), os.path.join(ROOT, "maven"), ROOT]

import boto3
from common import print_table

KINDS = ("PUT", "GET", "LIST", "HEAD", "DELETE", "POST")


def start_store(workdir: str):
    """moto's S3 server and the counting proxy in front of it; the proxy."""
    from moto.server import ThreadedMotoServer
    from s3_proxy import S3Proxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return S3Proxy(f"{host}:{port}").start()


def new_bucket(proxy) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}").create_bucket(Bucket=name)
    return name


def session(proxy, partitions: int, snapshot_interval: int):
    import fetch
    from pyspark.sql import SparkSession

    jars = ",".join(str(j) for j in fetch.fetch(fetch.hadoop_aws_bundle()))
    builder = (
        SparkSession.builder.master("local[2]").appName("object_store-bench")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions)).config("spark.jars", jars)
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # Spark's provider snapshots (uploads SST files) every this many batches, as ours
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", str(snapshot_interval))
        .config("spark.statestore.snapshotInterval", str(snapshot_interval))
    )
    s3a = {"endpoint": f"http://{proxy.endpoint}", "path.style.access": "true", "connection.ssl.enabled": "false",
           "access.key": "testing", "secret.key": "testing", "endpoint.region": "us-east-1",
           "impl.disable.cache": "true"}
    for key, value in s3a.items():
        builder = builder.config(f"spark.hadoop.fs.s3a.{key}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_input(folder: str, batches: int, rows: int, keys: int) -> None:
    import pandas as pd

    os.makedirs(folder, exist_ok=True)
    for n in range(batches):
        frame = pd.DataFrame({"key": [f"k{(n * rows + i) % keys}" for i in range(rows)], "ts": range(rows)})
        temp = os.path.join(folder, f".{n:05d}.tmp")
        frame.to_json(temp, orient="records", lines=True)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))
        os.replace(temp, os.path.join(folder, f"{n:05d}.json"))


def run_query(spark, proxy, which: str, workdir: str, partitions: int, latency: float) -> dict:
    """Run the query over every input file (one batch each); requests per batch and partition
    of its state, and the median batch duration."""
    import spark_jobs
    from pyspark.sql import functions as F

    from spark_statestore import Serdes
    from spark_statestore.spark import KeyValue, changes_schema, partition_function

    location = f"s3a://{new_bucket(proxy)}/{which}"
    events = spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1).json(
        os.path.join(workdir, "input"))
    if which == "spark_statestore":
        schema = changes_schema("string", "long")
        fn = partition_function(spark_jobs.partition_totals(checkpoint=location), location,
                                [KeyValue("totals", Serdes.string(), Serdes.int64())], partitions=partitions,
                                output_schema=schema)
        out = events.repartition(partitions, "key").mapInArrow(fn, schema)
        mode, area = "append", "statestore"
    else:
        out = events.groupBy("key").agg(F.count("*").alias("total"))
        mode, area = "update", "state"
    proxy.reset_counts()
    proxy.faults.latency = latency
    query = (out.writeStream.format("noop").outputMode(mode).option("checkpointLocation", location)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    proxy.faults.latency = 0.0
    if query.exception() is not None:
        raise RuntimeError(f"{which}: {query.exception()}")
    progress = query.recentProgress
    batches = len(progress)
    counts = proxy.snapshot(area)
    per = {k: counts.get(k, 0) / (batches * partitions) for k in (*KINDS, "bytes_up", "bytes_down")}
    per["requests"] = sum(per[k] for k in KINDS)
    per["batch_s"] = statistics.median(p["durationMs"]["triggerExecution"] / 1000 for p in progress)
    per["batches"] = batches
    return per


def _restored_objects(proxy) -> list[str]:
    """The keys the requests since `reset_counts` read (whole or ranged GETs), in order."""
    seen: dict[str, None] = {}
    for kind, path in list(proxy.log):
        if kind == "GET":
            seen.setdefault(path.lstrip("/"), None)
    return list(seen)


def sdk_download(proxy, paths: list[str], target: str) -> tuple[float, int]:
    """Seconds for boto3 alone to download the objects `paths` (`bucket/key`), one after
    another as whole objects, and their bytes: what a restore reads, like for like."""
    s3 = boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}")
    os.makedirs(target, exist_ok=True)
    total = 0
    t0 = time.perf_counter()
    for i, path in enumerate(paths):
        bucket, key = path.split("/", 1)
        local = os.path.join(target, str(i))
        s3.download_file(bucket, key, local)
        total += os.path.getsize(local)
    seconds = time.perf_counter() - t0
    shutil.rmtree(target, ignore_errors=True)
    return seconds, total


def _changed(version: int, keys: int) -> range:
    """The keys batch `version` writes: every key first, then 1% of them per batch."""
    return range(keys) if version == 0 else range(version, keys, 100)


def restore_times(proxy, keys: int, interval: int, workdir: str) -> list[dict]:
    """Restores of partition 0 of `keys` keys on a new local directory, with 1 and
    `interval - 1` changelogs to apply on top of the newest snapshot (the most it gets),
    each against boto3 downloading the very objects the restore read."""
    from spark_statestore.checkpoint import object_store
    from spark_statestore.checkpoint.files import snapshot_versions
    from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources

    object_store.use(object_store.S3Settings(endpoint=proxy.endpoint, scheme="http"))
    location = f"s3a://{new_bucket(proxy)}/restore"
    spec = [StoreSpec.key_value("kv")]
    options = PartitionOptions(snapshot_interval=interval, min_batches_to_retain=4 * interval)
    local = os.path.join(workdir, f"writer-{keys}")
    results = []
    for version in range(2 * interval - 1):
        state = PartitionState(location, 0, spec, WorkerResources(local), options)
        state.open(version)
        store = state.store("kv")
        for i in _changed(version, keys):
            store.put(b"key-%012d" % i, b"value-%d-%d" % (i, version))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
        snapshot = max((v for v in snapshot_versions(state.durable) if v <= version), default=None)
        if snapshot is None or version - snapshot not in (1, interval - 1):
            continue
        fresh = os.path.join(workdir, f"fresh-{keys}-{version}")
        proxy.reset_counts()
        t0 = time.perf_counter()
        reader = PartitionState(location, 0, spec, WorkerResources(fresh), options)
        reader.open(version + 1)
        seconds = time.perf_counter() - t0
        reader.close()
        shutil.rmtree(fresh, ignore_errors=True)
        results.append(_restore_row("spark_statestore", keys, version - snapshot, seconds, proxy, workdir))
    shutil.rmtree(local, ignore_errors=True)
    return results


def _restore_row(which: str, keys: int, behind: int, seconds: float, proxy, workdir: str) -> dict:
    counts = proxy.snapshot()
    requests = sum(counts.get(k, 0) for k in KINDS)
    sdk, size = sdk_download(proxy, _restored_objects(proxy), os.path.join(workdir, "sdk"))
    return {"state": which, "keys": keys, "changelogs": behind, "restore_s": seconds, "sdk_s": sdk, "bytes": size,
            "requests": requests}


def _provider_input(folder: str, versions: range, keys: int) -> None:
    """Input files of Spark's provider's restore query: one parquet file per batch, the
    keys `_changed` says (batch n's file holds what version n of ours writes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    for n in versions:
        column = pa.array([f"key-{i:012d}" for i in _changed(n, keys)])
        temp = os.path.join(folder, f".{n:05d}.tmp")
        pq.write_table(pa.table({"key": column}), temp)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))
        os.replace(temp, os.path.join(folder, f"{n:05d}.parquet"))


def _provider_snapshots(proxy, bucket: str, prefix: str) -> tuple[list[int], int]:
    """(the snapshot versions of Spark's provider under `prefix`, its newest changelog version)."""
    import re

    s3 = boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}")
    names = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
             for o in page.get("Contents", [])]
    snapshots = sorted(int(m.group(1)) for n in names if (m := re.search(r"/(\d+)(?:_[^/]*)?\.zip$", n)))
    changelogs = [int(m.group(1)) for n in names if (m := re.search(r"/(\d+)(?:_[^/]*)?\.changelog$", n))]
    return snapshots, max(changelogs, default=0)


def provider_restore_times(spark, proxy, keys: int, interval: int, workdir: str, wait: float) -> list[dict]:
    """The same restores on Spark's RocksDB provider (changelog checkpointing): its query
    (one shuffle partition, a count per key) runs `interval` batches, stops, and runs
    `interval` more; a provider of partition 0 on the driver, with a new local directory,
    then loads the versions 1 and `interval - 1` changelogs past a snapshot with none
    between (`getReadStore`: what a task whose executor lost its copy does first), timed.
    Its snapshots are uploaded by the state store's maintenance (the newest one made, every
    `spark.sql.streaming.stateStore.maintenanceInterval`, and as a stopped query's store
    unloads): after each run, the bucket is watched until they show."""
    from pyspark.sql import functions as F

    bucket = new_bucket(proxy)
    location = f"s3a://{bucket}/provider"
    folder = os.path.join(workdir, f"provider-input-{keys}")
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        for run in range(2):
            _provider_input(folder, range(run * interval, (run + 1) * interval), keys)
            counts = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).parquet(folder) \
                .groupBy("key").agg(F.count("*").alias("total"))
            query = (counts.writeStream.format("noop").outputMode("update").option("checkpointLocation", location)
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(f"Spark's provider restore query: {query.exception()}")
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                snapshots, newest = _provider_snapshots(proxy, bucket, "provider/state/0/0/")
                if snapshots and max(snapshots) > run * interval:
                    break
                time.sleep(2)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    snapshots, newest = _provider_snapshots(proxy, bucket, "provider/state/0/0/")
    print(f"Spark's provider, {keys} keys: snapshots {snapshots}, newest version {newest}", file=sys.stderr)
    wanted = {}  # changelogs on top of the snapshot -> (the version, its snapshot)
    for behind in (1, interval - 1):
        bases = [s for s in snapshots if s + behind <= newest and not any(s < t <= s + behind for t in snapshots)]
        if bases:
            wanted[behind] = (max(bases) + behind, max(bases))
    jvm = spark._jvm
    pkg = jvm.org.apache.spark.sql.execution.streaming.state
    none = jvm.scala.Option.empty()
    key_schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("key string")
    value_schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("total bigint")
    session_state = spark._jsparkSession.sessionState()
    results = []
    for behind, (version, snapshot) in sorted(wanted.items()):
        store_id = pkg.StateStoreId(f"{location}/state", 0, 0, "default")
        provider_id = pkg.StateStoreProviderId(store_id, jvm.java.util.UUID.randomUUID())
        provider = getattr(getattr(pkg, "StateStoreProvider$"), "MODULE$").createAndInit(
            provider_id, key_schema, value_schema, pkg.NoPrefixKeyStateEncoderSpec(key_schema), False,
            pkg.StateStoreConf.apply(session_state.conf()), session_state.newHadoopConf(), False, none)
        proxy.reset_counts()
        t0 = time.perf_counter()
        store = provider.getReadStore(version, none)
        seconds = time.perf_counter() - t0
        store.abort()
        provider.close()
        results.append(_restore_row("Spark's RocksDB provider", keys, behind, seconds, proxy, workdir))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rows", type=int, default=2000, help="input rows per batch")
    parser.add_argument("--keys", default="1000000", help="restore sizes (comma-separated key counts; 0: none)")
    parser.add_argument("--no-requests", action="store_true", help="only the restores (no requests per batch)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--snapshot-interval", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--snapshot-wait", type=float, default=150.0,
                        help="seconds to wait for Spark's provider to upload its snapshots (its maintenance)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = tempfile.mkdtemp(prefix="object_store-bench-")
    try:
        proxy = start_store(workdir)
        spark = session(proxy, args.partitions, args.snapshot_interval)
        spark.conf.set("spark.statestore.localDir", os.path.join(workdir, "local"))
        results = {} if args.no_requests else request_costs(spark, proxy, workdir, args)
        restore_rows = []
        for keys in (int(k) for k in args.keys.split(",") if int(k) > 0):
            rows = restore_times(proxy, keys, args.snapshot_interval, workdir)
            rows += provider_restore_times(spark, proxy, keys, args.snapshot_interval, workdir, args.snapshot_wait)
            for r in rows:
                restore_rows.append([r["state"], r["keys"], r["changelogs"], round(r["bytes"] / 1e6, 1), r["requests"],
                                     round(r["restore_s"], 2), round(r["sdk_s"], 2),
                                     round(r["restore_s"] / (r["bytes"] / 1e9), 1), round(r["restore_s"] / r["sdk_s"], 2)])
        spark.stop()
        if restore_rows:
            print("restore of partition 0 whose local copy is lost (no added latency), against boto3 downloading "
                  "the very objects the restore read")
            print_table(["state", "keys", "changelogs applied", "MB read", "requests", "restore s", "SDK download s",
                         "restore s per GB", "restore / SDK"], restore_rows)
        if results:
            ours = results["spark_statestore", 0.0]["requests"]
            theirs = results["spark_provider", 0.0]["requests"]
            print(f"headline: Spark provider / spark_statestore object-store requests per batch = {theirs / ours:.2f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def request_costs(spark, proxy, workdir: str, args) -> dict:
    """Both queries with and without added latency; prints the table, returns the rows."""
    write_input(os.path.join(workdir, "input"), args.batches, args.rows, keys=500)
    rows, results = [], {}
    for latency in (0.0, args.latency_ms / 1000):
        for which in ("spark_statestore", "spark_provider"):
            r = run_query(spark, proxy, which, workdir, args.partitions, latency)
            results[which, latency] = r
            rows.append([which, f"{latency * 1000:.0f}", r["batches"]] + [round(r[k], 2) for k in KINDS]
                        + [round(r["requests"], 2), int(r["bytes_up"]), int(r["bytes_down"]), round(r["batch_s"], 2)])
    print(f"requests per batch and partition of the state ({args.partitions} partitions, "
          f"snapshot every {args.snapshot_interval} batches; Spark's offsets and commits left out)")
    print_table(["state", "latency ms", "batches", *KINDS, "requests", "bytes up", "bytes down", "batch s (median)"], rows)
    return results


if __name__ == "__main__":
    main()
