"""The early trigger under a burst, governor off against on, in one run.

A feeder writes one input file per second (`--rate` rows each: a running count per key
over `--keys` keys, each row stamped with the time its file was written), and ten files
per second during the burst (`--burst-seconds`, starting half a trigger interval after a
batch began, the expected case). A stateful per-partition query (`partition_function`,
one `get_all` and `put_columns` per Arrow batch) reads them with a `--trigger`-second
processing-time trigger and takes whatever arrived (no admission limit), once with
`spark.statestore.earlyTrigger.enabled=false` and once with it on; the uncommitted limit
sits between a steady batch and a batch of one interval of burst.

Reported per run: the largest per-task peak of uncommitted bytes and its mean over the
batches that processed burst rows, spills, batches, early triggers, and the latency of
the burst's rows from their file being written to the end of the batch that processed
them (p50 / p99).

    python benchmarks/early_trigger.py [--trigger 30] [--rate 2000] [--burst-seconds 90]
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

from bursts import BurstShape, run_burst  # noqa: E402
from common import print_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trigger", type=int, default=30, help="processing-time trigger, seconds")
    parser.add_argument("--rate", type=int, default=2000, help="rows per file (one file a second, ten in the burst)")
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--lead-seconds", type=int, default=60)
    parser.add_argument("--burst-seconds", type=int, default=90)
    parser.add_argument("--tail-seconds", type=int, default=60)
    parser.add_argument("--limit", type=int, default=0, help="uncommitted limit (default: between a steady and a burst batch)")
    args = parser.parse_args()
    shape = BurstShape(args.trigger, args.rate, args.keys, args.lead_seconds, args.burst_seconds, args.tail_seconds, args.limit)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    workdir = tempfile.mkdtemp(prefix="bench-early-")
    results = {}
    try:
        for governor in (False, True):
            results[governor] = run_burst(spark, workdir, shape, governor).summary
            print(f"governor {'on' if governor else 'off'}: {results[governor]}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [
        [("on" if g else "off"), r["peak"], r["burst_peak_mean"], r["spills"], r["batches"], r["early"], r["p50"], r["p99"]]
        for g, r in results.items()
    ]
    print(f"\ntrigger {args.trigger} s, {args.rate} rows/s steady, 10x for {args.burst_seconds} s, "
          f"limit {shape.uncommitted_limit} bytes")
    print_table(
        ["governor", "peak uncommitted bytes/task", "mean peak, burst batches", "spills", "batches",
         "early triggers", "burst latency p50 s", "p99 s"],
        rows,
    )
    off, on = results[False], results[True]
    print(f"burst batches' mean peak off/on = {off['burst_peak_mean'] / on['burst_peak_mean']:.2f}; "
          f"burst latency p99 off/on = {off['p99'] / on['p99']:.2f}")
    print(f"headline: peak uncommitted bytes per task off/on = {off['peak'] / on['peak']:.2f}")


if __name__ == "__main__":
    main()
