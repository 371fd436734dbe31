"""Value schema evolution: a running total per customer whose value type changes twice.

The job counts purchases per customer in a record store (`Serdes.record(dataclass)`) with
per-partition processing, and is restarted three times on the same checkpoint:

1. `TotalV1(purchases: int, last_item: str)`;
2. `TotalV2(spend: float = 0.0, purchases: int)`: a field added with a default, one
   dropped, the rest reordered. Compatible: old values are read in the new shape;
3. `TotalV3(purchases: str)`: not compatible. Declared alone it is refused on the driver
   (the message names the store, the field, both types and `migrate=`); with `migrate=`
   the values are rewritten once, in the first batch, as a version of their own.

After each run it prints the state as the state reader sees it; at the end also as of the
last batch before the migration (time travel, in the old shape).

    python examples/schema_evolution.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import SparkSession

from spark_statestore import Serdes
from spark_statestore.serde.evolution import SchemaEvolutionError
from spark_statestore.spark import KeyValue, partition_function, register_reader

PURCHASES = [["ann", "bob"], ["ann", "cy"], ["bob", "bob"], ["cy"], ["ann", "dee", "dee"]]


@dataclass
class TotalV1:
    purchases: int
    last_item: str


@dataclass
class TotalV2:
    spend: float = 0.0
    purchases: int = 0


@dataclass
class TotalV3:
    purchases: str


def next_total(old, cls):
    """One more purchase, in the shape `cls` of this run."""
    if cls is TotalV1:
        return TotalV1((old.purchases if old else 0) + 1, "book")
    if cls is TotalV2:
        return TotalV2((old.spend if old else 0.0) + 9.5, (old.purchases if old else 0) + 1)
    return TotalV3(str(int(old.purchases if old else "0") + 1))


def counting(cls):
    def totals(batches, stores):
        store = stores["totals"]
        for batch in batches:
            for customer in batch.column("customer").to_pylist():
                store.put(customer, next_total(store.get(customer), cls))
        return iter(())

    return totals


def run(spark: SparkSession, workdir: str, files: range, serde) -> None:
    inputs, checkpoint = os.path.join(workdir, "input"), os.path.join(workdir, "checkpoint")
    os.makedirs(inputs, exist_ok=True)
    for n in files:
        temp = os.path.join(inputs, f".{n}.tmp")
        pd.DataFrame({"customer": PURCHASES[n]}).to_json(temp, orient="records", lines=True)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))  # the file source takes files by modification time
        os.replace(temp, os.path.join(inputs, f"{n:03d}.json"))
    stores = [KeyValue("totals", Serdes.string(), serde)]
    fn = partition_function(counting(serde.cls), checkpoint, stores, partitions=2, emit_changes=False)
    query = (
        spark.readStream.schema("customer string").option("maxFilesPerTrigger", 1).json(inputs)
        .repartition(2, "customer").mapInArrow(fn, "customer string")
        .writeStream.format("noop").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()


def show(spark: SparkSession, workdir: str, title: str, **options) -> None:
    reader = spark.read.format("spark_statestore").option("checkpointLocation", os.path.join(workdir, "checkpoint"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    print(f"--- {title}")
    reader.load().select("key", "value.*").orderBy("key").show(truncate=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="schema-evolution-")
    shutil.rmtree(os.path.join(workdir, "checkpoint"), ignore_errors=True)
    shutil.rmtree(os.path.join(workdir, "input"), ignore_errors=True)
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.statestore.localDir", os.path.join(workdir, "local")).getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    register_reader(spark)

    run(spark, workdir, range(2), Serdes.record(TotalV1))
    show(spark, workdir, "v1: purchases and the last item")
    run(spark, workdir, range(2, 4), Serdes.record(TotalV2))
    show(spark, workdir, "v2 (compatible): spend added with a default, last_item dropped")
    try:
        run(spark, workdir, range(4, 5), Serdes.record(TotalV3))
    except SchemaEvolutionError as e:
        print(f"--- v3 without a migration is refused on the driver:\n{e}")
    migrate = Serdes.record(TotalV3, migrate=lambda old: TotalV3(str(old["purchases"])))
    run(spark, workdir, range(4, 5), migrate)
    show(spark, workdir, "v3 (migrated in batch 4): purchases as text")
    show(spark, workdir, "time travel to batch 3, before the migration", batchId=3)
    spark.stop()


if __name__ == "__main__":
    main()
