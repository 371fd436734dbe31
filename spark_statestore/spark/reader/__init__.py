"""Reading a query's spark_statestore state with Spark (`pyspark.sql.datasource`).

    spark.read.format("spark_statestore")
        .option("checkpointLocation", "/checkpoints/totals").option("store", "totals").load()

one row per record of the store (`partition`, `key`, `value`, and `window_start` /
`window_end` for window stores), keys and values decoded with the serdes the state
recorded (no processor class needed), one input partition per state partition, read on
the executors from the durable files alone (the writer's lock and local copies are never
touched). Options:

* `isolationLevel`: READ_COMMITTED (default: `spark.statestore.isolationLevel`) reads the
  newest version Spark committed; READ_UNCOMMITTED adds a prepared batch that has not.
* `batchId`: the version after that batch (time travel, within retention).
* `readChangeFeed=true` with `changeStartBatchId` (and `changeEndBatchId`, default the
  committed batch): one row per change (`batch_id`, `partition`, `change`: put / delete /
  expire, `key`, `value`, `window_start`, `window_end`).

`spark.readStream.format("spark_statestore").option("readChangeFeed", "true")` streams the
committed changes exactly once (offsets are batch ids; `startingBatchId`, and where
pyspark's Python streaming sources have admission control `maxBatchesPerTrigger` or
`maxRowsPerTrigger`). `format("spark_statestore_metadata")`
describes the state: stores, partitions, committed and retained versions, snapshots, bytes.
`format("spark_statestore_metrics")` gives the per-batch metrics (`option("level",
"tasks")`: per batch and partition), as `StateStoreMetrics(checkpoint)` does.
`register_reader(spark)` registers the three formats (building any operator does it too).
"""

from spark_statestore.spark.reader.columns import column_for
from spark_statestore.spark.reader.metrics import METRICS_FORMAT, MetricsDataSource
from spark_statestore.spark.reader.request import FORMAT, METADATA_FORMAT
from spark_statestore.spark.reader.register import register_reader
from spark_statestore.spark.reader.source_class import StateStoreDataSource
from spark_statestore.spark.reader.sources import StateMetadataDataSource

__all__ = [
    "FORMAT",
    "METADATA_FORMAT",
    "METRICS_FORMAT",
    "MetricsDataSource",
    "StateMetadataDataSource",
    "StateStoreDataSource",
    "column_for",
    "register_reader",
]
