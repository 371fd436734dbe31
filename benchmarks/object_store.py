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
3. restore time of a partition whose local copy is lost, at `--keys` keys (comma-separated),
   with the newest snapshot 1 and `snapshotInterval` versions old, against downloading the
   same objects with the AWS SDK alone (boto3, one object after another).

The last line: `headline: Spark provider / spark_statestore object-store requests per batch = x`.

    ./dev bench object_store [--batches 8] [--keys 100000,1000000]
"""

from __future__ import annotations

import argparse
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


def restore_times(proxy, keys: int, interval: int, workdir: str) -> dict:
    """Seconds to restore partition 0 of `keys` keys on a new local directory with the newest
    snapshot 1 and `interval` versions old, and to download its objects with boto3 alone."""
    from spark_statestore.checkpoint import object_store
    from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources

    object_store.use(object_store.S3Settings(endpoint=proxy.endpoint, scheme="http"))
    bucket = new_bucket(proxy)
    location = f"s3a://{bucket}/restore"
    spec = [StoreSpec.key_value("kv")]
    options = PartitionOptions(snapshot_interval=interval, min_batches_to_retain=4 * interval)
    local = os.path.join(workdir, f"writer-{keys}")
    results = {}
    # version 0 puts every key, each later one changes 1% of them; snapshots are taken at
    # versions interval-1, 2*interval-1, ...: after version `interval` the newest is 1
    # version old, after 2*interval-2 it is interval-1 versions old (the oldest it gets)
    measured = {interval: "1 version old", 2 * interval - 2: f"{interval - 1} versions old"}
    for version in range(2 * interval - 1):
        state = PartitionState(location, 0, spec, WorkerResources(local), options)
        state.open(version)
        store = state.store("kv")
        changed = range(keys) if version == 0 else range(version, keys, 100)
        for i in changed:
            store.put(b"key-%012d" % i, b"value-%d-%d" % (i, version))
        state.prepare()
        state.close()
        state.wait_for_snapshots()
        if version in measured:
            fresh = os.path.join(workdir, f"fresh-{keys}-{version}")
            t0 = time.perf_counter()
            reader = PartitionState(location, 0, spec, WorkerResources(fresh), options)
            reader.open(version + 1)
            results[measured[version]] = time.perf_counter() - t0
            reader.close()
            shutil.rmtree(fresh, ignore_errors=True)
    s3 = boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}")
    objects = [o for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="restore/statestore/0/")
               for o in page.get("Contents", [])]
    total = sum(o["Size"] for o in objects)
    target = os.path.join(workdir, f"sdk-{keys}")
    os.makedirs(target, exist_ok=True)
    t0 = time.perf_counter()
    for o in objects:
        s3.download_file(bucket, o["Key"], os.path.join(target, o["Key"].replace("/", "_")))
    results["AWS SDK download of every object"] = time.perf_counter() - t0
    results["bytes"] = total
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--rows", type=int, default=2000, help="input rows per batch")
    parser.add_argument("--keys", default="100000,1000000", help="restore sizes (comma-separated key counts)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--snapshot-interval", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = tempfile.mkdtemp(prefix="object_store-bench-")
    try:
        proxy = start_store(workdir)
        write_input(os.path.join(workdir, "input"), args.batches, args.rows, keys=500)
        spark = session(proxy, args.partitions, args.snapshot_interval)
        spark.conf.set("spark.statestore.localDir", os.path.join(workdir, "local"))
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
        spark.stop()
        restore_rows = []
        for keys in (int(k) for k in args.keys.split(",") if k):
            r = restore_times(proxy, keys, args.snapshot_interval, workdir)
            sdk = r["AWS SDK download of every object"]
            for label in ("1 version old", f"{args.snapshot_interval - 1} versions old"):
                if label in r:
                    restore_rows.append([keys, label, r["bytes"] / 1e6, round(r[label], 2), round(sdk, 2),
                                         round(r[label] / sdk, 2)])
        print("restore of a partition whose local copy is lost (no added latency)")
        print_table(["keys", "newest snapshot", "MB in the bucket", "restore s", "SDK download s", "ratio"], restore_rows)
        ours = results["spark_statestore", 0.0]["requests"]
        theirs = results["spark_provider", 0.0]["requests"]
        print(f"headline: Spark provider / spark_statestore object-store requests per batch = {theirs / ours:.2f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
