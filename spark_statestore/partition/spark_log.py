"""What Spark's own checkpoint files say about a stopped query, read without Spark.

* `offsets/<N>` (Spark's offset log): batch N was planned; its second line is JSON whose
  `conf` holds `spark.sql.shuffle.partitions`, the partition count of Spark's state in
  that batch (Spark keeps it across restarts, and its offline `repartition` writes a
  batch of its own with the new count);
* `commits/<N>`: batch N committed (`StateLocation.committed_batch`).

A rescale reads them to check the query is stopped (`rescale.check_stopped`).
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import number_of
from spark_statestore.errors import CorruptStateError, StateStoreError
from spark_statestore.partition.generations import MAX_PARTITIONS

OFFSETS = "offsets"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class QueryMayBeRunningError(StateStoreError, ValueError):
    """The query's checkpoint shows a batch in flight: it may be running."""


def _offsets(location: str, filesystem: pafs.FileSystem | None) -> DurableDir:
    fs, root = resolve_location(location, filesystem)
    return DurableDir(fs, f"{root}/{OFFSETS}")


def _planned(location: str, filesystem: pafs.FileSystem | None) -> list[int]:
    names = [number_of(info.base_name) for info in _offsets(location, filesystem).list()]
    return [n for n in names if n is not None]


def newest_planned_batch(location: str, filesystem: pafs.FileSystem | None = None) -> int | None:
    """The newest batch in Spark's offset log (None: none)."""
    return max(_planned(location, filesystem), default=None)


def oldest_planned_batch(location: str, filesystem: pafs.FileSystem | None = None) -> int | None:
    """The oldest batch Spark's offset log still keeps (None: none)."""
    return min(_planned(location, filesystem), default=None)


def spark_partitions(location: str, batch: int, filesystem: pafs.FileSystem | None = None) -> int | None:
    """Spark's state partition count in `batch` (its offset log entry; None: not recorded)."""
    durable = _offsets(location, filesystem)
    try:
        lines = durable.read_bytes(str(batch)).decode("utf-8", "replace").splitlines()
        conf = json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else {}
        count = int(conf[SHUFFLE_PARTITIONS]) if SHUFFLE_PARTITIONS in conf else None
    except (FileNotFoundError, ValueError, AttributeError, TypeError):
        return None
    if count is not None and count > MAX_PARTITIONS:  # before it sizes anything
        raise CorruptStateError(
            f"{durable.uri(str(batch))} records {SHUFFLE_PARTITIONS} = {count}, above the {MAX_PARTITIONS} "
            f"partitions a state may have"
        )
    return count
