"""The `spark_statestore` source's class, pickled by value with `options` (see there): its
methods check the options before they import anything of the package."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_statestore.spark.reader.options import FORMAT, checked_location


class StateStoreDataSource(DataSource):
    """`format("spark_statestore")`: the records or the change feed of one store."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """The rows' schema; called on the driver by `load()`, so every option of a batch
        read is checked there, before an action runs a task."""
        checked_location(self.options)
        from spark_statestore.spark.reader.sources import read_schema

        return read_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_statestore.spark.reader.sources import batch_reader

        return batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_statestore.spark.reader.sources import stream_reader

        return stream_reader(self.options, schema)
