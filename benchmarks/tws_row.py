"""The Row-based `transformWithState` (pyspark 4.1+) against `transformWithStateInPandas`,
both with spark_statestore stores, on the same counting query, in one run.

Per key and batch, one `StoreProcessor` reads the key's running count from a KeyValue
store, adds the key's rows, writes it back and emits one row (key, count): the pandas
processor counts the rows of its DataFrames, the Row processor the Rows it is given. For
each key count in `--keys`, both queries read the same parquet files (one micro-batch per
file, `--rows-per-batch` rows, the files of `steady_state.generate`) with trigger
availableNow into a noop sink, on local[2] with `--partitions` shuffle partitions. Rows/s
is taken from Spark's progress reports over the batches after the warm-up (input rows over
trigger execution time), as in `spark_state.py --steady`.

The headline is the geometric mean over the key counts of the ratio of the two rates.

    python benchmarks/tws_row.py [--rows-per-batch N] [--keys K1,K2] [--batches B] [--warmup W]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from common import print_table
from pyspark import cloudpickle
from pyspark.sql import Row
from spark_state import _builder
from steady_state import COUNT_SCHEMA, KV_STORES, TwsCounts, generate, run_query, steady_rate

from spark_statestore.spark import StoreProcessor, compat

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class RowCounts(StoreProcessor):
    """Running count per key in a key-value store, over Rows (`transformWithState`)."""

    stores = KV_STORES

    def process_rows(self, key: Any, rows: Iterator[Row], timer_values: Any) -> Iterator[Row]:
        counts = self.store("counts")
        total = (counts.get(key[0]) or 0) + sum(1 for _ in rows)
        counts.put(key[0], total)
        yield Row(key=key[0], count=total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows-per-batch", type=int, default=100_000)
    parser.add_argument("--keys", default="1000,50000", help="key counts, comma-separated (one input each)")
    parser.add_argument("--batches", type=int, default=3, help="measured batches after the warm-up")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    if not compat.FACTS.row_transform_with_state:
        sys.exit(f"pyspark {compat.VERSION} has no Row-based transformWithState "
                 f"({compat.minors_with('row_transform_with_state')} have)")
    workdir = tempfile.mkdtemp(prefix="bench-tws-row-")
    spark = (
        _builder().config("spark.sql.shuffle.partitions", str(args.partitions))
        .config("spark.statestore.localDir", os.path.join(workdir, "local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    operators = [
        ("transformWithStateInPandas", lambda g, c: g.transformWithStateInPandas(TwsCounts(c), COUNT_SCHEMA, "Update", "None")),
        ("transformWithState", lambda g, c: g.transformWithState(RowCounts(c), COUNT_SCHEMA, "Update", "None")),
    ]
    table, ratios = [], []
    try:
        for keys in [int(k) for k in args.keys.split(",")]:
            inputs = os.path.join(workdir, f"input-{keys}")
            generate(inputs, args.warmup + args.batches, args.rows_per_batch, keys)
            rates = {}
            for name, build in operators:
                checkpoint = os.path.join(workdir, "checkpoints", f"{name}-{keys}")
                events = spark.readStream.schema("key string, ts long, value double").option("maxFilesPerTrigger", 1)
                started = time.perf_counter()
                query = run_query(build(events.parquet(inputs).groupBy("key"), checkpoint), checkpoint, "update")
                rates[name], measured = steady_rate(query, args.warmup)
                print(f"{keys:,} keys, {name}: {rates[name]:,.0f} rows/s over {measured} batches "
                      f"({time.perf_counter() - started:.0f} s wall)", flush=True)
            ratio = rates["transformWithState"] / rates["transformWithStateInPandas"]
            ratios.append(ratio)
            table.append([f"{keys:,}", rates["transformWithStateInPandas"], rates["transformWithState"], ratio])
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{args.rows_per_batch:,} rows per batch, {args.batches} batches after {args.warmup} warm-up, "
          f"local[2], {args.partitions} partitions, pyspark {compat.VERSION}, load average {os.getloadavg()[0]:.1f}")
    print_table(["keys", "transformWithStateInPandas rows/s", "transformWithState rows/s", "ratio"], table)
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"headline: transformWithState / transformWithStateInPandas rows per second with stores = {mean:.2f}")


if __name__ == "__main__":
    main()
