"""The state reader's work past its light checks (`options`), and the metadata source."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_statestore.partition.reading import StateLocation
from spark_statestore.spark import compat
from spark_statestore.spark.reader.changes import ChangeFeedReader, change_range
from spark_statestore.spark.reader.columns import change_schema, record_schema
from spark_statestore.spark.reader.metadata import METADATA_SCHEMA, MetadataReader
from spark_statestore.spark.reader.records import RecordsReader
from spark_statestore.spark.reader.options import (
    FORMAT,
    METADATA_FORMAT,
    RANGE_OPTIONS,
    STREAM_OPTIONS,
    bool_option,
    check_option_names,
    option,
    refuse_options,
)
from spark_statestore.spark.reader.request import ReadRequest
from spark_statestore.spark.reader.stream import ChangeStreamReader

ADMISSION_OPTIONS = ("maxBatchesPerTrigger", "maxRowsPerTrigger")


def read_schema(options: Any) -> StructType:
    """`StateStoreDataSource.schema` past its light checks: the store's rows' schema, every
    option of a batch read checked (the versions against the state)."""
    request = ReadRequest.of(options)
    if bool_option(options, "readChangeFeed"):
        if option(options, "changeStartBatchId") is not None:
            change_range(request)
        return change_schema(request.spec)
    schema = record_schema(request.spec)
    RecordsReader(request, schema)
    return schema


def batch_reader(options: Any, schema: StructType) -> DataSourceReader:
    """The reader of the records, or of the changes with `readChangeFeed`."""
    request = ReadRequest.of(options)
    if bool_option(options, "readChangeFeed"):
        refuse_options(options, STREAM_OPTIONS, "applies to a stream (readStream); a batch read of changes "
                       "takes changeStartBatchId and changeEndBatchId")
        return ChangeFeedReader(request, schema)
    return RecordsReader(request, schema)


def stream_reader(options: Any, schema: StructType) -> DataSourceStreamReader:
    """The stream of committed changes (`readChangeFeed` is required)."""
    if not bool_option(options, "readChangeFeed"):
        raise ValueError(
            f"a stream of {FORMAT} is the stream of committed changes: add .option('readChangeFeed', 'true')"
        )
    refuse_options(options, RANGE_OPTIONS, "applies to a batch read of changes; a stream starts at "
                   "startingBatchId and reads every batch committed after it")
    return change_stream_reader(ReadRequest.of(options), schema)


def change_stream_reader(request: ReadRequest, schema: StructType) -> DataSourceStreamReader:
    """The stream reader of this pyspark: with admission control (`maxBatchesPerTrigger`,
    `maxRowsPerTrigger`) where Python streaming sources have it, else without, refusing those
    options by name."""
    if compat.FACTS.stream_admission_control:
        from spark_statestore.spark.reader.admitted import AdmittedChangeStreamReader

        return AdmittedChangeStreamReader(request, schema)
    for name in ADMISSION_OPTIONS:
        if option(request.options, name) is not None:
            raise ValueError(
                f"option {name} needs admission control for Python streaming sources, which "
                f"pyspark {compat.VERSION} lacks ({compat.minors_with('stream_admission_control')} has it): "
                f"leave {name} out to read every committed batch in each trigger"
            )
    return ChangeStreamReader(request, schema)


class StateMetadataDataSource(DataSource):
    """`format("spark_statestore_metadata")`: one row per partition and store."""

    @classmethod
    def name(cls) -> str:
        return METADATA_FORMAT

    def _state(self) -> StateLocation:
        check_option_names(self.options, ("path", "checkpointLocation"), METADATA_FORMAT)
        location = option(self.options, "checkpointLocation") or option(self.options, "path")
        if not location:
            raise ValueError(f"the {METADATA_FORMAT} source needs option checkpointLocation")
        return StateLocation.open(str(location))

    def schema(self) -> StructType:
        self._state()  # at load(): a wrong option or location fails there
        return METADATA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MetadataReader(self._state())
