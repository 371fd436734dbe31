"""A Spark driver running every adapter's totals query over one Kafka topic, for the test
that kills a driver with SIGKILL mid-batch (test_kafka).

    python kafka_driver.py BOOTSTRAP TOPIC WORKDIR ADAPTER... [--hold-in N] [--until-caught-up]

Each adapter's query has its checkpoint in WORKDIR/ADAPTER/checkpoint and runs with a
processing-time trigger; `--hold-in N` makes a task of batch N wait to be killed (once per
checkpoint); `--until-caught-up` stops the queries once each committed a batch that read
the topic to its current end, and exits 0. Spark's Kafka connector comes from
SPARK_STATESTORE_KAFKA_JARS (a `spark.jars` value).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paths import EXAMPLES  # noqa: E402

sys.path.insert(0, str(EXAMPLES))

import kafka_jobs
from local_kafka import KafkaTopics


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("workdir")
    parser.add_argument("adapters", nargs="+")
    parser.add_argument("--hold-in", type=int, action="append", default=[])
    parser.add_argument("--until-caught-up", action="store_true")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    spark = (
        # a slot for each query's held task and two to run the others: 6 task threads
        SparkSession.builder.master("local[6,4]").appName("kafka_driver")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(kafka_jobs.PARTITIONS))
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.jars", os.environ["SPARK_STATESTORE_KAFKA_JARS"])
        .config("spark.statestore.localDir", os.path.join(args.workdir, "local-state"))
        .config("spark.statestore.snapshotInterval", "3")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    queries = {}
    for adapter in args.adapters:
        checkpoint = os.path.join(args.workdir, adapter, "checkpoint")
        queries[adapter] = kafka_jobs.start(spark, adapter, args.bootstrap, args.topic, checkpoint,
                                            {"processingTime": "500 milliseconds"}, hold_in=args.hold_in)
    topics = KafkaTopics(args.bootstrap)
    while True:
        for adapter, query in queries.items():
            if not query.isActive:
                print(f"query of {adapter} ended: {query.exception()}", flush=True)
                return 1
        if args.until_caught_up:
            ends = {p: end for p, end in topics.end_offsets(args.topic).items() if end > 0}
            if all(all(kafka_jobs.committed_ends(os.path.join(args.workdir, a, "checkpoint")).get(p, 0) >= end
                       for p, end in ends.items()) for a in queries):
                for query in queries.values():
                    query.stop()
                spark.stop()
                return 0
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
