"""The Kafka Streams application of benchmarks/vs_kafka_streams.py computes what this library's
per-partition job computes on the same topic: the same windows with the same counts, late events
dropped alike (both equal a plain-Python reference of Kafka Streams' rule, which drops some).

Needs a JDK and Maven (the application is built from benchmarks/kafka_streams), a broker and
Spark's Kafka connector (pyspark 4.2: `./dev minors` runs it).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time

import paths
import pytest
from conftest import KAFKA_JARS, NO_KAFKA_REASON, topic_name

pytestmark = [pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.skipif(KAFKA_JARS is None, reason=NO_KAFKA_REASON),
              pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("java") is None,
                                 reason="building the Kafka Streams application needs mvn and a JDK")]
sys.path.insert(0, str(paths.ROOT / "benchmarks"))
import windowed_counts_ks  # noqa: E402 - benchmarks/windowed_counts_ks.py
PARTITIONS = 3


def late_stream(count: int, keys: int, seed: int = 5) -> list[tuple[str, str, int]]:
    """(key, value, timestamp) records: event time advancing 50 ms a record, one in ten late
    by 2 to 40 s (within and beyond the 15 s grace)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        ts = 1 + n * 50
        if rng.random() < 0.1:
            ts = max(1, ts - rng.randrange(2_000, 40_000))
        key = f"k{rng.randrange(keys)}"
        out.append((key, f'{{"key":"{key}","ts":{ts}}}', ts))
    return out


def test_kafka_streams_and_the_per_partition_job_write_the_same_windows(classic_spark, kafka, tmp_path):
    spark = classic_spark
    topic, ks_out, spark_out = topic_name("ks-in"), topic_name("ks-out"), topic_name("pp-out")
    for name in (topic, ks_out, spark_out):
        kafka.create_topic(name, PARTITIONS)
    records = late_stream(6_000, 40)
    kafka.produce(topic, records)
    expected = windowed_counts_ks.reference(kafka.records(topic))
    assert expected and sum(w["count"] for w in expected.values()) < 4 * len(records) * 0.98  # some were late

    app = topic_name("ks-app")
    log = open(tmp_path / "kafka-streams.log", "w")
    streams = subprocess.Popen(
        windowed_counts_ks.kafka_streams_command(kafka.bootstrap, topic, ks_out, app, str(tmp_path / "ks-state"), 1),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        spark.conf.set("spark.statestore.localDir", str(tmp_path / "local"))
        query = windowed_counts_ks.build_query(spark, kafka.bootstrap, topic, spark_out, str(tmp_path / "checkpoint"),
                                               PARTITIONS, {"availableNow": True}, max_offsets=900)
        query.awaitTermination()
        assert query.exception() is None
        assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3  # state carried across batches (the first closes no window: 15 s of event time)
        deadline = time.monotonic() + 300
        while windowed_counts_ks.committed(kafka.bootstrap, app, topic, PARTITIONS) < len(records):
            assert streams.poll() is None, (tmp_path / "kafka-streams.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Kafka Streams did not commit the whole topic"
            time.sleep(0.5)
    finally:
        spark.conf.unset("spark.statestore.localDir")
        streams.terminate()
        streams.wait(timeout=120)
        log.close()
    assert windowed_counts_ks.windows_of(kafka.records(ks_out)) == expected
    assert windowed_counts_ks.windows_of(kafka.records(spark_out)) == expected
