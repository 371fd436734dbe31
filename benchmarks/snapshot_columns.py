"""What a snapshot's columns file (`COLUMNS.arrow`, read by the state reader) costs the
writer, in one run: the write path with and without it, in turns.

Two checkpoints of one partition, each loaded with `--keys` records of a key-value store
(string keys, int64 values, as `state_reader.py` writes). Then `--rounds` rounds; in each,
both arms in turn (which goes first alternates) run `--batches` batches, each rewriting
`--updates` keys, with `snapshot_interval` = `--batches`, so each round takes one snapshot
of the whole state; a round ends when its snapshot's upload (verification, the columns
file, the upload, retention: the background thread's work) is done, so its wall time
covers that work. The partitions are opened as a Spark worker opens them: one uploader
and the local copies kept open between batches.

Arm `columns`: the library's default. Arm `none`: `PartitionOptions(snapshot_columns=False)`,
the snapshot verified as it was before the columns file existed (every entry of every
column family read with checksums on, nothing written). The last line: the median over
rounds of the write path's rows per second with the columns file over without.

    python benchmarks/snapshot_columns.py [--keys N] [--updates N] [--batches N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from statistics import median

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

from spark_statestore import Serdes  # noqa: E402
from spark_statestore.partition import (  # noqa: E402
    Layout,
    PartitionOptions,
    PartitionState,
    WorkerResources,
    record_query_layout,
)
from spark_statestore.partition.open_copies import OpenCopies  # noqa: E402
from spark_statestore.partition.uploads import Uploader  # noqa: E402
from spark_statestore.spark import KeyValue  # noqa: E402

STORE = KeyValue("totals", Serdes.string(), Serdes.int64())


class Arm:
    """One checkpoint of one partition written by batches; `columns`: its snapshots write
    the columns file (`PartitionOptions.snapshot_columns`)."""

    def __init__(self, work: str, name: str, columns: bool, keys: int, interval: int) -> None:
        self.location = os.path.join(work, name, "checkpoint")
        self.resources = WorkerResources(os.path.join(work, name, "local"), uploader=Uploader(), open_copies=OpenCopies())
        self.columns = columns
        self.interval = interval
        self.keys = pa.array([f"key-{i:09d}" for i in range(keys)])
        self.batch = 0
        self.upload_seconds: list[float] = []
        record_query_layout(self.location, Layout.of([STORE.spec()], 1))

    def run(self, batches: int, updates: int) -> None:
        """`batches` batches of `updates` rewritten keys (all keys in the first batch), then
        the wait for their snapshot uploads."""
        states = []
        for _ in range(batches):
            options = PartitionOptions(partitions=1, snapshot_interval=self.interval, snapshot_columns=self.columns)
            state = PartitionState(self.location, 0, [STORE.spec()], self.resources, options)
            upload = state.snapshots._upload

            def timed_upload(*args, upload=upload):
                started = time.perf_counter()
                try:
                    return upload(*args)
                finally:
                    self.upload_seconds.append(time.perf_counter() - started)

            state.snapshots._upload = timed_upload
            state.open(self.batch)
            keys = self.keys
            if self.batch:
                start = (self.batch * updates) % (len(keys) - updates)
                keys = keys.slice(start, updates)
            STORE.typed(state.store("totals")).put_columns(keys, np.full(len(keys), self.batch, np.int64))
            state.prepare()
            state.close()
            states.append(state)
            self.batch += 1
        for state in states:
            state.wait_for_snapshots()

    def close(self) -> None:
        self.resources.open_copies.close()
        self.resources.uploader.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10, help="batches per round: one snapshot each round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-columns-")
    loads = [os.getloadavg()[0]]
    arms = {
        "columns": Arm(work, "columns", True, args.keys, args.batches),
        "none": Arm(work, "none", False, args.keys, args.batches),
    }
    wall: dict[str, list[float]] = {name: [] for name in arms}
    cpu: dict[str, list[float]] = {name: [] for name in arms}
    try:
        for arm in arms.values():  # the load, and one untimed round (compactions after the load settle)
            arm.run(1 + args.batches, args.updates)
            arm.upload_seconds.clear()
        for turn in range(args.rounds):
            for name in list(arms)[:: 1 if turn % 2 == 0 else -1]:
                started, used = time.perf_counter(), time.process_time()
                arms[name].run(args.batches, args.updates)
                wall[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - used)
        loads.append(os.getloadavg()[0])
        sizes = {}
        for name, arm in arms.items():
            manifests = os.path.join(arm.location, "statestore", "0", "snapshots")
            newest = max(int(n.split(".")[0]) for n in os.listdir(manifests) if n.endswith(".manifest"))
            files = os.path.join(manifests, str(newest))
            sizes[name] = sum(os.path.getsize(os.path.join(files, f)) for f in os.listdir(files))
    finally:
        for arm in arms.values():
            arm.close()
        shutil.rmtree(work, ignore_errors=True)
    rows_per_round = args.batches * args.updates
    print(
        f"\n{args.keys:,} keys, {args.batches} batches of {args.updates:,} rewritten keys per round (one snapshot "
        f"each), {args.rounds} rounds in turns; medians"
    )
    print_table(
        ["snapshot work", "rows/s", "CPU s per round", "verify+upload s per snapshot", "snapshot's own files bytes"],
        [
            [name, rows_per_round / median(wall[name]), median(cpu[name]), median(arm.upload_seconds), sizes[name]]
            for name, arm in arms.items()
        ],
    )
    ratios = [none / columns for columns, none in zip(wall["columns"], wall["none"], strict=True)]
    print("load average (1 min) at the start and the end: " + ", ".join(f"{x:.1f}" for x in loads))
    print(f"per round, with / without the columns file: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(
        f"headline: write path rows per second with / without the columns file = {median(ratios):.2f} "
        f"(range {min(ratios):.2f} to {max(ratios):.2f}, {len(ratios)} rounds)"
    )


if __name__ == "__main__":
    main()
