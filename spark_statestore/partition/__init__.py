"""The Spark-free partition-state protocol: `PartitionState` with its open / prepare /
close lifecycle, its options and a process's shared resources (`options`), opening at a
version as a pipeline (`place`: where the partition lives, the one value the steps share;
`history` lists the durable files and serves them verified, `plan` decides from that
history alone, purely, `recovery` carries the plan out), the partition's metadata (layout,
version identities), copies kept open between tasks, and reading the state from outside
the query (DESIGN.md, "Partition state protocol")."""

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
