"""What Spark's own checkpoint files say about a stopped query, read without Spark.

* `offsets/<N>` (Spark's offset log): batch N was planned; its second line is JSON whose
  `conf` holds `spark.sql.shuffle.partitions`, the partition count of Spark's state in
  that batch (Spark keeps it across restarts, and its offline `repartition` writes a
  batch of its own with the new count);
* `commits/<N>`: batch N committed (`StateLocation.committed_batch`).

`check_stopped` is what a rescale checks before it moves anything: a rescale of a query
that may still be running would move a state that keeps changing under it.
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from spark_statestore.checkpoint.filesystem import DurableDir, resolve_location
from spark_statestore.checkpoint.names import number_of
from spark_statestore.errors import CorruptStateError, StateStoreError
from spark_statestore.partition.generations import MAX_PARTITIONS
from spark_statestore.partition.reading import StateLocation

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


def check_stopped(state: StateLocation) -> int:
    """The newest committed batch, after checking that nothing is in flight above it:
    Spark's offset log plans no uncommitted batch, and no partition of the generation the
    next batch runs in has a prepared changelog above the commit. `QueryMayBeRunningError`
    naming what was found otherwise."""
    committed = state.committed_batch()
    if committed is None:
        raise QueryMayBeRunningError(
            f"no batch of the query at {state.location} is committed (commits/ is empty): there is no state to move"
        )
    planned = newest_planned_batch(state.location, state.filesystem)
    if planned is not None and planned > committed:
        raise QueryMayBeRunningError(
            f"batch {planned} of the query at {state.location} is planned (offsets/{planned}) but not committed "
            f"(newest commit: {committed}): the query is running, or stopped before that batch finished; run it "
            f"until the batch commits, stop it, then rescale"
        )
    current = state.at_batch(committed + 1)
    for partition in current.partitions:
        changelogs, _ = current.versions(partition)
        above = [v for v in changelogs if v > committed]
        if above:
            raise QueryMayBeRunningError(
                f"partition {partition} of the state at {state.location} has prepared version {max(above)}, above "
                f"Spark's newest commit {committed}: a batch is in flight (the query may be running); stop the "
                f"query and let its last batch commit, then rescale"
            )
    return committed
