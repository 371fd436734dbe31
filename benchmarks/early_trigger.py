"""The early trigger under a burst: governor off, governor on without and with adaptive
admission, in one run.

A feeder writes one input file per second (`--rate` rows each: a running count per key
over `--keys` keys, each row stamped with the time its file was written), and ten files
per second during the burst (`--burst-seconds`, starting half a trigger interval after a
batch began, the expected case). A stateful per-partition query (`partition_function`,
one `get_all` and `put_columns` per Arrow batch) reads them with a `--trigger`-second
processing-time trigger, once with `spark.statestore.earlyTrigger.enabled=false`, once
with it on and `spark.statestore.earlyTrigger.admission=false` (each batch takes whatever
arrived), once with both on (the driver bounds each batch's files). The uncommitted limit is
about two steady batches' worth (a task holds about half a batch's keys, at
`BYTES_PER_KEY`, measured for this query's store); the burst is ten times the steady rate.

Reported per run: the largest per-task peak of uncommitted bytes against the limit (over
every batch of the burst, and for its first batch), its mean over the batches that processed
burst rows, spills, batches, early triggers, and the latency of the burst's rows from their
file being written to the end of the batch that processed them (p50 / p99). The headline
compares admission off (the governor alone) with admission on.

`--steady`: the same stream without a burst, governor off against governor and admission on,
twice each after a warm-up run (on, off, off, on; the better of each): every batch takes all that waits (no
batch is cut short), and the query's capacity, rows per second of batch time over the
batches of a whole interval's input, is the same; the headline is its ratio on/off.

`--kafka`: the same stream through a Kafka topic (a broker on loopback, `examples/local_kafka.py`)
read by Spark's Kafka source, whose admission is a row limit (`maxOffsetsPerTrigger`'s) where
the file source's is a file count; the same table and headline. It needs a pyspark whose Kafka
connector Maven Central serves here (`./dev bench early_trigger --kafka` runs it on 4.2).

    python benchmarks/early_trigger.py [--trigger 10] [--rate 2000] [--burst-seconds 30] [--steady] [--kafka]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from bursts import BYTES_PER_KEY, BurstShape, run_burst  # noqa: E402
from common import print_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trigger", type=int, default=10, help="processing-time trigger, seconds")
    parser.add_argument("--rate", type=int, default=2000, help="rows per file (one file a second, ten in the burst)")
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--lead-seconds", type=int, default=40)
    parser.add_argument("--burst-seconds", type=int, default=30)
    parser.add_argument("--tail-seconds", type=int, default=30)
    parser.add_argument("--limit", type=int, default=0, help="uncommitted limit (default: two steady batches' worth)")
    parser.add_argument("--steady", action="store_true", help="no burst: steady-state capacity, governor off against on")
    parser.add_argument("--kafka", action="store_true", help="the stream through a Kafka topic (a local broker)")
    args = parser.parse_args()
    limit = args.limit or 2 * (args.trigger * args.rate // 2) * BYTES_PER_KEY
    burst = 0 if args.steady else args.burst_seconds
    shape = BurstShape(args.trigger, args.rate, args.keys, args.lead_seconds, burst, args.tail_seconds, limit)
    from pyspark.sql import SparkSession

    workdir = tempfile.mkdtemp(prefix="bench-early-")
    builder = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
    )
    kafka = None
    if args.kafka:
        from local_kafka import LocalKafka, connector_jars

        jars = connector_jars()
        if jars is None:
            raise SystemExit("no Kafka connector is served for this pyspark: ./dev bench early_trigger --kafka runs on 4.2")
        builder = builder.config("spark.jars", ",".join(map(str, jars)))
        kafka = LocalKafka(os.path.join(workdir, "kafka")).start()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results = {}
    arms = {"governor off": (False, False), "admission off": (True, False), "admission on": (True, True)}
    # steady: a run that warms the JVM and the workers (left out), then on, off, off, on; the best of each
    order = ["warm-up", "admission on", "governor off", "governor off", "admission on"] if args.steady else list(arms)
    arms["warm-up"] = arms["governor off"]
    try:
        for n, name in enumerate(order):
            summary = run_burst(spark, os.path.join(workdir, str(n)), shape, *arms[name], kafka=kafka).summary
            print(f"{name}: {summary}", flush=True)
            if name == "warm-up":
                continue
            if name not in results or summary["rows_per_batch_s"] > results[name]["rows_per_batch_s"]:
                results[name] = summary
    finally:
        spark.stop()
        if kafka is not None:
            kafka.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.steady:
        steady(results, shape)
        return
    rows = [
        [name, r["peak"], f"{r['burst_max_over_limit']:.2f}", f"{r['first_burst_over_limit']:.2f}", r["burst_peak_mean"],
         r["spills"], r["batches"], r["early"], r["cut_short"], f"{r['burst_batch_s']:.2f}", r["p50"], r["p99"]]
        for name, r in results.items()
    ]
    print(f"\n{'Kafka topic' if args.kafka else 'files'}: trigger {args.trigger} s, {args.rate} rows/s steady, 10x for {args.burst_seconds} s, "
          f"limit {shape.uncommitted_limit} bytes")
    print_table(
        ["run", "peak uncommitted bytes/task", "burst max/limit", "first burst batch/limit", "mean peak, burst batches",
         "spills", "batches", "early triggers", "cut short", "burst batch s", "burst latency p50 s", "p99 s"],
        rows,
    )
    off, on = results["admission off"], results["admission on"]
    print(f"governor off/admission on peak = {results['governor off']['peak'] / on['peak']:.2f}; "
          f"burst latency p99 admission off/on = {off['p99'] / on['p99']:.2f}")
    print(f"headline: peak uncommitted bytes per task off/on = {off['peak'] / on['peak']:.2f}")


def steady(results: dict, shape: BurstShape) -> None:
    """The steady-state table and headline (capacity with admission on against governor off)."""
    rows = [[name, r["peak"], r["spills"], r["batches"], r["cut_short"], round(r["rows_per_batch_s"]), r["all_p50"],
             r["all_p99"], r["rows"], r["written"]] for name, r in results.items()]
    print(f"\ntrigger {shape.trigger} s, {shape.rate} rows/s steady, no burst, limit {shape.uncommitted_limit} bytes")
    print_table(["run", "peak uncommitted bytes/task", "spills", "batches", "cut short", "rows/s of batch time",
                 "latency p50 s", "p99 s", "rows out", "rows written"], rows)
    on, off = results["admission on"], results["governor off"]
    print(f"headline: steady-state rows per second of batch time admission on/governor off = "
          f"{on['rows_per_batch_s'] / off['rows_per_batch_s']:.2f}")


if __name__ == "__main__":
    main()
