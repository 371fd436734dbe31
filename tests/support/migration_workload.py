"""A record store whose schema changes incompatibly, driven the way Spark drives it.

Batches 0..2 write `TotalV1` values; then the "driver" declares `TotalV2` (the total as a
string: no compatible change) with `migrate=`, which takes effect in batch 3; batches 3
and 4 run with it. A batch's writes are a function of its id; the driver writes Spark's
commit file `commits/N` after the batch's prepare and close, and re-runs a batch that did
not commit. `expected(n)` is the model's state after batch n.

With `--ttl` the store's entries expire: its clock is 10 ms per batch and an entry lives
`TTL` ms from its write, so one written in batch 1 is live in the migration's batch (3)
and expired in batch 4; the migration keeps each entry's expiry.

    python tests/support/migration_workload.py CHECKPOINT LOCAL_DIR --phase v1|v2 [--chunk N] [--ttl]
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from spark_statestore import Serdes, ThreadCache
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.partition.reading import StateLocation
from spark_statestore.spark import KeyValue
from spark_statestore.spark.driver.evolution import evolve_declarations
from spark_statestore.stores import migration

KEYS = 50
V1_BATCHES = 3
LAST_BATCH = 4
TTL = 25  # ms, on a clock of 10 ms per batch


@dataclass
class TotalV1:
    total: int
    label: str


@dataclass
class TotalV2:
    total: str
    seen: int = 0


def migrate(old: dict) -> TotalV2:
    return TotalV2(f"{old['total']}:{old['label']}", 1)


def declaration(phase: str, ttl: bool = False) -> KeyValue:
    serde = Serdes.record(TotalV1) if phase == "v1" else Serdes.record(TotalV2, migrate=migrate)
    return KeyValue("totals", Serdes.string(), serde, ttl=TTL if ttl else None)


def batch_keys(batch: int) -> list[str]:
    return [f"k{(batch * 7 + i * 3) % KEYS:02d}" for i in range(20 + batch)]


def apply_batch(values: dict, batch: int) -> None:
    """The model: what batch `batch` does to the values (dataclass instances)."""
    for key in batch_keys(batch):
        old = values.get(key)
        if batch < V1_BATCHES:
            values[key] = TotalV1((old.total if old else 0) + 1, f"b{batch}")
        else:
            values[key] = TotalV2(f"{old.total if old else ''}+", (old.seen if old else 0) + 1)


def expected(last: int, ttl: bool = False) -> dict:
    values: dict = {}
    expiries: dict = {}
    for batch in range(last + 1):
        if ttl:  # the batch's clock moves first: what expired is gone
            for key in [k for k, e in expiries.items() if e <= batch * 10]:
                del values[key], expiries[key]
        if batch == V1_BATCHES:
            values = {k: migrate({"total": v.total, "label": v.label}) for k, v in values.items()}
        apply_batch(values, batch)
        expiries.update((key, batch * 10 + TTL) for key in batch_keys(batch))
    return values


def last_committed(checkpoint: str) -> int:
    committed = StateLocation(checkpoint, None).committed_batch()  # type: ignore[arg-type]
    return -1 if committed is None else committed


def driver(checkpoint: str, phase: str, ttl: bool = False) -> KeyValue:
    """What `build_operator` does before a query (re)starts: evolve and record the layout."""
    (declared,) = evolve_declarations([declaration(phase, ttl)], checkpoint)
    record_query_layout(checkpoint, Layout.of([declared.spec()], 1))
    return declared


def run_batch(checkpoint: str, local: str, declared: KeyValue, batch: int) -> int:
    """One task (open, migrate if due, the batch's writes, prepare, close), then the
    driver's commit; returns how many values the migration rewrote."""
    resources = WorkerResources(local, cache=ThreadCache(2000))
    state = PartitionState(checkpoint, 0, [declared.spec()], resources, PartitionOptions(snapshot_interval=2))
    state.open(batch)
    try:
        if declared.ttl is not None:  # as `TaskState` does: the clock moves before the migration
            state.advance_clocks(batch * 10, None)
        rewritten = migration.migrate_if_due(state.store("totals"), declared.value_serde, state.version, batch)
        store = declared.typed(state.store("totals"))
        values = {k: store.get(k) for k in set(batch_keys(batch))}
        apply_batch(values, batch)
        for key in set(batch_keys(batch)):
            store.put(key, values[key])
        state.prepare()
    finally:
        state.close()
    state.wait_for_snapshots()
    commits = os.path.join(checkpoint, "commits")
    os.makedirs(commits, exist_ok=True)
    with open(os.path.join(commits, str(batch)), "w") as f:
        f.write("v1\n{}\n")
    return rewritten


def run(checkpoint: str, local: str, phase: str, ttl: bool = False) -> list[int]:
    """The driver (re)starts the query in `phase` and runs the batches not committed yet."""
    declared = driver(checkpoint, phase, ttl)
    last = V1_BATCHES - 1 if phase == "v1" else LAST_BATCH
    return [run_batch(checkpoint, local, declared, b) for b in range(last_committed(checkpoint) + 1, last + 1)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("local_dir")
    parser.add_argument("--phase", choices=["v1", "v2"], required=True)
    parser.add_argument("--chunk", type=int, default=migration.CHUNK)
    parser.add_argument("--ttl", action="store_true")
    args = parser.parse_args()
    migration.CHUNK = args.chunk
    print("rewritten", run(args.checkpoint, args.local_dir, args.phase, args.ttl), flush=True)


if __name__ == "__main__":
    main()
