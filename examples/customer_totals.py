"""Per-customer spend with `applyInPandasWithState` and spark_statestore stores.

Each purchase adds to its customer's total (a key-value store) and to the customer's last
five purchases (a JSON value in another store); the GroupState keeps how many batches saw
the customer, the way applyInPandasWithState users keep small per-key state. Each batch
emits one row per customer it saw: the running total, the purchase count and the recent
purchases. It generates its input, runs on a local Spark until the input is done, and
prints the totals:

    python examples/customer_totals.py [--workdir DIR] [--files N] [--purchases-per-file N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any, Iterator

import numpy as np
import pandas as pd

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, with_stores

STORES = [
    KeyValue("totals", Serdes.string(), Serdes.json()),  # {"spend": cents, "purchases": n}
    KeyValue("recent", Serdes.string(), Serdes.json()),  # the last five amounts, newest last
]
OUTPUT = "customer string, spend_cents long, purchases long, batches long, recent string"


def update(key: tuple, frames: Iterator[pd.DataFrame], group_state: Any, stores: Any) -> Iterator[pd.DataFrame]:
    """One customer's purchases of one batch."""
    customer = key[0]
    amounts = [int(a) for frame in frames for a in frame["amount_cents"]]
    totals, recent = stores["totals"], stores["recent"]
    total = totals.get(customer) or {"spend": 0, "purchases": 0}
    total = {"spend": total["spend"] + sum(amounts), "purchases": total["purchases"] + len(amounts)}
    totals.put(customer, total)
    last = ((recent.get(customer) or []) + amounts)[-5:]
    recent.put(customer, last)
    batches = (group_state.get[0] if group_state.exists else 0) + 1
    group_state.update((batches,))
    yield pd.DataFrame(
        {
            "customer": [customer],
            "spend_cents": [total["spend"]],
            "purchases": [total["purchases"]],
            "batches": [batches],
            "recent": [",".join(map(str, last))],
        }
    )


def generate(directory: str, files: int, purchases: int, customers: int = 20, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    for n in range(files):
        frame = pd.DataFrame(
            {
                "customer": [f"customer-{c:03d}" for c in rng.integers(0, customers, purchases)],
                "amount_cents": rng.integers(100, 20_000, purchases),
            }
        )
        temp = os.path.join(directory, f".{n:05d}.tmp")
        frame.to_json(temp, orient="records", lines=True)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))  # the file source goes by modification time
        os.replace(temp, os.path.join(directory, f"{n:05d}.json"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=os.path.abspath("out/customer_totals"))
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--purchases-per-file", type=int, default=200)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    shutil.rmtree(args.workdir, ignore_errors=True)
    generate(os.path.join(args.workdir, "input"), args.files, args.purchases_per_file)

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark = (
        SparkSession.builder.master("local[2]").appName("customer_totals")
        .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    checkpoint = os.path.join(args.workdir, "checkpoint")
    fn = with_stores(update, checkpoint, STORES)
    purchases = spark.readStream.schema("customer string, amount_cents long").option("maxFilesPerTrigger", 1).json(
        os.path.join(args.workdir, "input")
    )
    out = purchases.groupBy("customer").applyInPandasWithState(
        fn, OUTPUT, "batches long", "Update", GroupStateTimeout.NoTimeout
    )
    output = os.path.join(args.workdir, "output")

    def write(frame: Any, batch_id: int) -> None:  # idempotent: a batch that runs again rewrites its file
        frame.write.mode("overwrite").parquet(os.path.join(output, f"batch={batch_id}"))

    query = (
        out.writeStream.outputMode("update").foreachBatch(write).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    rows = spark.read.parquet(output)
    latest = rows.groupBy("customer").agg({"spend_cents": "max", "purchases": "max"}).orderBy("customer")
    print(f"output: {os.path.join(args.workdir, 'output')}  checkpoint: {checkpoint}")
    latest.show(5, truncate=False)
    print(f"customers: {latest.count()}, batches: {len(query.recentProgress)}")
    spark.stop()


if __name__ == "__main__":
    main()
