"""A query's state written batch by batch with `PartitionState` the way Spark would run it:
every key in the partition `pmod(hash(key), n)` sends it to, a total per key (key-value
store, string keys) and counts per key and window (window store, int64 keys), a commit
file per batch. `reference(batches)` is what the state must hold after those batches,
on any partition count. Also run as a script (a rescale in a process a test kills):

    python tests/support/rescale_workload.py rescale CHECKPOINT N
"""

from __future__ import annotations

import os
import sys

from spark_statestore import murmur3
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources, record_query_layout
from spark_statestore.partition.layout import Layout
from spark_statestore.partition.reading import StateLocation, VersionReader
from spark_statestore.serde import serde_for
from spark_statestore.stores.spec import StoreSpec
from spark_statestore.stores.typed import TypedKeyValueStore, TypedWindowStore

SPECS = [
    StoreSpec.key_value("totals", key_serde="string", value_serde="int64"),
    StoreSpec.window("counts", 10_000, 100, key_serde="int64_key", value_serde="int64", segment_interval=500),
]
STRING, INT64, INT_KEY = serde_for("string"), serde_for("int64"), serde_for("int64_key")


def events(batch: int) -> list[tuple[str, int, int]]:
    """(key, amount, window start) of a batch: 40 keys, some deleted in batch 4."""
    return [(f"key-{(batch * 7 + i) % 40}", i % 5 + 1, batch * 100) for i in range(30)]


def run_batch(location: str, local: str, partitions: int, batch: int) -> None:
    """Run `batch` on `partitions` partitions and commit it."""
    rows = events(batch)
    for p in range(partitions):
        state = PartitionState(
            location, p, SPECS, WorkerResources(os.path.join(local, str(p))), PartitionOptions(snapshot_interval=3)
        )
        state.open(batch)
        totals = TypedKeyValueStore(state.store("totals"), STRING, INT64)
        counts = TypedWindowStore(state.store("counts"), INT_KEY, INT64)
        for key, amount, start in rows:
            if murmur3.partition_of([key], partitions) != p:
                continue
            totals.put(key, (totals.get(key) or 0) + amount)
        for key, amount, start in rows:
            number = int(key.split("-")[1])
            if murmur3.partition_of([number], partitions) == p:
                counts.put(number, (counts.get(number, start) or 0) + 1, start)
        if batch == 4:
            for key in ("key-3", "key-4"):
                if murmur3.partition_of([key], partitions) == p:
                    totals.delete(key)
        state.prepare()
        state.close()
        state.wait_for_snapshots()
    os.makedirs(os.path.join(location, "commits"), exist_ok=True)
    with open(os.path.join(location, "commits", str(batch)), "w") as f:
        f.write("v1\n{}\n")


def start(location: str) -> None:
    record_query_layout(location, Layout.of(SPECS))


def reference(batches: int) -> tuple[dict, dict]:
    """Totals by key and counts by (number, window start) after batches 0..batches-1."""
    totals: dict = {}
    counts: dict = {}
    for batch in range(batches):
        for key, amount, start in events(batch):
            totals[key] = totals.get(key, 0) + amount
            number = int(key.split("-")[1])
            counts[(number, start)] = counts.get((number, start), 0) + 1
        if batch == 4:
            totals.pop("key-3", None)
            totals.pop("key-4", None)
    return totals, counts


def read_state(location: str, batch: int) -> tuple[dict, dict, int]:
    """Totals and counts as of `batch` (time travel), checking every entry is in the
    partition Spark sends its key to; and the partition count it was read on."""
    state = StateLocation.open(location).at_batch(batch)
    count = state.layout.history[state.generation_number].partitions or len(state.partitions)
    totals: dict = {}
    counts: dict = {}
    for p in state.partitions:
        with VersionReader(state, p, batch, state.committed_batch()) as reader:
            for key, value in reader.records(SPECS[0]):
                assert murmur3.partition_of([STRING.decode(key)], count) == p
                totals[STRING.decode(key)] = INT64.decode(value)
            for key, value, start in reader.records(SPECS[1]):
                assert murmur3.partition_of([INT_KEY.decode(key)], count) == p
                counts[(INT_KEY.decode(key), start)] = INT64.decode(value)
    return totals, counts, count


if __name__ == "__main__":
    from spark_statestore.partition.rescale import rescale

    _, command, checkpoint, partitions = sys.argv
    assert command == "rescale"
    rescale(checkpoint, int(partitions))
