"""`format("spark_statestore_metrics")`: the per-batch metrics of a query's state as a
DataFrame, read from the checkpoint location alone (the same rows as
`StateStoreMetrics(checkpoint).recent()` and `.tasks()`, in any session).

Options (any other is refused, naming it):

* `checkpointLocation` (or the load path): the query's checkpoint location;
* `level`: `batches` (default; one row per committed batch) or `tasks` (one row per
  committed batch and partition: the record of the attempt whose changelog is durable);
* `batches`: only the newest N committed batches (default: every batch still kept).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import DataType, DoubleType, LongType, StringType, StructField, StructType

from spark_statestore.partition.reading import StateLocation
from spark_statestore.spark.driver.metrics import StateStoreMetrics
from spark_statestore.spark.reader.request import int_option, option
from spark_statestore.spark.task_metrics import MAXED, SUMMED, TaskMetrics

METRICS_FORMAT = "spark_statestore_metrics"
LEVELS = ("batches", "tasks")
_OPTIONS = {"checkpointlocation", "path", "level", "batches"}
_TYPES: dict[str, DataType] = {"int": LongType(), "bool": LongType(), "float": DoubleType(), "str": StringType(),
                               "str | None": StringType(), "int | None": LongType()}

TASKS_SCHEMA = StructType([StructField(f.name, _TYPES[str(f.type)]) for f in fields(TaskMetrics)])
BATCHES_SCHEMA = StructType(
    [StructField("query_id", StringType()), StructField("batch_id", LongType()),
     StructField("partitions", LongType()), StructField("attempts", LongType())]
    + [StructField(name, LongType()) for name in SUMMED]
    + [StructField(name, DoubleType()) for name in MAXED]
    + [StructField("rows_dropped_by_watermark", LongType()), StructField("early_triggers", LongType()),
       StructField("early_trigger_reason", StringType()), StructField("admission_limit", LongType()),
       StructField("admission_cut_short", LongType()), StructField("admission_reason", StringType())]
)


def _request(options: Any) -> tuple[str, str, int | None]:
    """The checkpoint location, level and number of batches of a read (strictly checked)."""
    unknown = sorted(str(k) for k in options if str(k).lower() not in _OPTIONS)
    if unknown:
        raise ValueError(f"the {METRICS_FORMAT} source has no option {unknown[0]!r}; its options are "
                         "checkpointLocation, level, batches")
    location = option(options, "checkpointLocation") or option(options, "path")
    if not location:
        raise ValueError(
            f"the {METRICS_FORMAT} source needs option checkpointLocation (the query's checkpoint location)"
        )
    level = str(option(options, "level", "batches")).strip().lower()
    if level not in LEVELS:
        raise ValueError(f"option level must be one of {list(LEVELS)}, got {option(options, 'level')!r}")
    return str(location), level, int_option(options, "batches", None, 1)


class MetricsDataSource(DataSource):
    """`format("spark_statestore_metrics")` (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return METRICS_FORMAT

    def schema(self) -> StructType:
        location, level, _ = _request(self.options)
        StateLocation.open(location)  # NoStateError at load(), naming the location, as the records reader
        return TASKS_SCHEMA if level == "tasks" else BATCHES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MetricsReader(*_request(self.options), schema)


class MetricsReader(DataSourceReader):
    """All rows in one input partition (a few per batch), read on an executor."""

    def __init__(self, location: str, level: str, batches: int | None, schema: StructType) -> None:
        self.location, self.level, self.batches, self.schema = location, level, batches, schema

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        metrics = StateStoreMetrics(self.location)
        rows = metrics.task_records(self.batches) if self.level == "tasks" else metrics.batches(self.batches)
        names = self.schema.fieldNames()
        for row in rows:
            yield tuple(_cast(row[name], field.dataType) for name, field in zip(names, self.schema.fields))


def _cast(value: Any, kind: DataType) -> Any:
    """A value as its column's type (flags and sums are ints, maxima floats)."""
    if value is None:
        return None
    if isinstance(kind, LongType):
        return int(value)
    if isinstance(kind, DoubleType):
        return float(value)
    return value
