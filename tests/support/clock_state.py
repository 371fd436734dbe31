"""Durable state of stores on every clock, for the clock compatibility test.

`write_state(root)` writes, under `root`, a partition checkpoint (`checkpoint/`: the
query's layout, changelogs, a snapshot) of stores declared with every public clock
spelling, run for `BATCHES` batches the way a Spark task runs them (TTL clocks moved at
the start of a batch, watermark-clocked stores moved to the watermark at its end), and a
persistent TTL key-value store on the watermark (`ttl_db/`: its database records the ttl).
`tests/partition/data/clocks_main/` holds what main's code wrote at commit 99dfd3f:

    python tests/support/clock_state.py tests/partition/data/clocks_main
"""

from __future__ import annotations

import os
import sys

from spark_statestore import Stores
from spark_statestore.partition import PartitionOptions, PartitionState, WorkerResources
from spark_statestore.partition.layout import Layout, record_query_layout
from spark_statestore.spark import KeyValue, Session, Window

TTL = 1_000
WATERMARKS = [None, 1_000, 1_500, 2_500]  # Spark's watermark of each batch (None: none yet)
BATCHES = len(WATERMARKS)


def timestamp(batch: int) -> int:
    """The batch's processing time."""
    return 10_000 + batch * 600


DECLARATIONS = [
    Window("win_watermark", 1_000, 100),
    Window("win_records", 1_000, 100, clock="records"),
    Session("ses_watermark", gap=100, retention=1_000),
    Session("ses_records", gap=100, retention=1_000, clock="records"),
    KeyValue("ttl_event", ttl=TTL, ttl_clock="event_time"),
    KeyValue("ttl_processing", ttl=TTL, ttl_clock="processing_time"),
]
SPECS = [d.spec() for d in DECLARATIONS]


def write_batch(state: PartitionState, batch: int) -> None:
    """Batch `batch`'s writes: at times around its watermark in every store."""
    time = 1_000 * (batch + 1)
    key = b"k%d" % batch
    state.store("win_watermark").put(key, b"w", time)
    state.store("win_records").put(key, b"r", time)
    state.store("ses_watermark").put(key, time, time + 50, b"s")
    state.store("ses_records").put(key, time, time + 50, b"s")
    state.store("ttl_event").put(key, b"e")
    state.store("ttl_processing").put(key, b"p")


def run_batch(checkpoint: str, local: str, batch: int) -> PartitionState:
    """Run `batch` on partition 0 and commit it as Spark would (its commit log entry)."""
    state = PartitionState(
        checkpoint, 0, SPECS, WorkerResources(local), PartitionOptions(snapshot_interval=2)
    )
    state.open(batch)
    watermark = WATERMARKS[batch]
    state.advance_clocks(timestamp(batch), watermark)
    write_batch(state, batch)
    if watermark is not None:
        for spec in SPECS:
            spec.store_kind.at_watermark(spec, state.store(spec.name), watermark)
    state.prepare()
    state.wait_for_snapshots()
    state.close()
    os.makedirs(os.path.join(checkpoint, "commits"), exist_ok=True)
    with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
        f.write("v1\n{}\n")
    return state


def write_state(root: str) -> None:
    checkpoint, local = os.path.join(root, "checkpoint"), os.path.join(root, "local")
    record_query_layout(checkpoint, Layout.of(SPECS, 1))
    for batch in range(BATCHES):
        run_batch(checkpoint, local, batch)
    store = Stores.persistent_key_value_store(
        "t", os.path.join(root, "ttl_db"), ttl=TTL, ttl_clock="event_time"
    )
    store.advance_time(5_000)
    store.put(b"a", b"1")
    store.commit({"src": 1})
    store.close()


if __name__ == "__main__":
    write_state(sys.argv[1])
