"""The Spark-free partition-state protocol: recovery of a database at a version, the
partition's metadata (layout, version identities), and `PartitionState` with its
open / prepare / close (DESIGN.md, "Partition state protocol")."""

from spark_statestore.partition.layout import Layout, LayoutMismatchError, read_query_layout, record_query_layout
from spark_statestore.partition.metadata import VersionId
from spark_statestore.partition.options import PartitionOptions, WorkerResources
from spark_statestore.partition.state import PartitionState
from spark_statestore.partition.stats import PartitionMetrics
from spark_statestore.partition.uploads import Uploader
from spark_statestore.stores.spec import StoreSpec

__all__ = [
    "Layout",
    "LayoutMismatchError",
    "PartitionMetrics",
    "PartitionOptions",
    "PartitionState",
    "StoreSpec",
    "Uploader",
    "VersionId",
    "WorkerResources",
    "read_query_layout",
    "record_query_layout",
]
