"""A de-duplicated change stream of running counts, per partition (`mapInArrow`).

Page views are counted per page in a key-value store behind the record cache. The
function only updates the counts (one `get_all` and one `put_columns` per Arrow batch);
the output is what the cache forwards when it flushes: one `Change(new, old)` per page
that changed, however many views it got in the batch (KIP-63), as rows of
`changes_schema(...)`. Downstream sees each page's count move from `old_value` to
`new_value`, batch by batch.

    python examples/change_stream.py [--workdir DIR] [--files N] [--views-per-file N]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
from typing import Any, Iterator

import numpy as np
import pandas as pd

from spark_statestore import Serdes
from spark_statestore.spark import KeyValue, changes_schema, partition_function

STORES = [KeyValue("views", Serdes.string(), Serdes.int64())]
PARTITIONS = 2


def count_views(batches: Iterator[Any], stores: Any) -> Iterator[Any]:
    views = stores["views"]
    for batch in batches:
        added = collections.Counter(batch.column("page").to_pylist())
        pages = list(added)
        current = views.get_all(pages)
        views.put_columns(pages, [(c or 0) + added[p] for c, p in zip(current, pages, strict=True)])
    return iter(())  # the output is the change stream the cache forwards


def generate(directory: str, files: int, views: int, pages: int = 50, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    for n in range(files):
        frame = pd.DataFrame({"page": [f"/page/{p:03d}" for p in rng.zipf(1.3, views) % pages]})
        temp = os.path.join(directory, f".{n:05d}.tmp")
        frame.to_json(temp, orient="records", lines=True)
        os.utime(temp, (1_000_000 + n, 1_000_000 + n))  # the file source goes by modification time
        os.replace(temp, os.path.join(directory, f"{n:05d}.json"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=os.path.abspath("out/change_stream"))
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--views-per-file", type=int, default=2_000)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    shutil.rmtree(args.workdir, ignore_errors=True)
    generate(os.path.join(args.workdir, "input"), args.files, args.views_per_file)

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").appName("change_stream")
        .config("spark.ui.showConsoleProgress", "false").config("spark.sql.adaptive.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    checkpoint = os.path.join(args.workdir, "checkpoint")
    schema = changes_schema("string", "long")
    fn = partition_function(count_views, checkpoint, STORES, partitions=PARTITIONS, output_schema=schema)
    views = spark.readStream.schema("page string").option("maxFilesPerTrigger", 1).json(os.path.join(args.workdir, "input"))
    query = (
        views.repartition(PARTITIONS, "page").mapInArrow(fn, schema)
        .writeStream.format("parquet").option("path", os.path.join(args.workdir, "output"))
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    changes = spark.read.parquet(os.path.join(args.workdir, "output"))
    print(f"output: {os.path.join(args.workdir, 'output')}  checkpoint: {checkpoint}")
    changes.orderBy("key", "batch_id").show(6, truncate=False)
    total = args.files * args.views_per_file
    print(f"{total} views became {changes.count()} changes over {len(query.recentProgress)} batches")
    spark.stop()


if __name__ == "__main__":
    main()
