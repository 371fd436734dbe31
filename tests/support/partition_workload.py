"""A deterministic batch workload on a `PartitionState`, driven the way Spark drives it.

A batch's writes are a function of (seed, batch id). The driver appends a batch id to a
commit log (Spark's `commits/N`) only after the batch's `prepare()` and `close()`
returned, and runs batch N only after N-1 committed, re-running a batch that did not
commit. `expected(seed, n)` rebuilds the state after batches 0..n with in-memory stores.

    python tests/support/partition_workload.py CHECKPOINT LOCAL_DIR --seed S --batches N
        [--snapshot-interval K] [--retain R] [--cache-bytes B] [--limit BYTES]
        [--apply-chunk-bytes B] [--keep-open N [--then-wait]]

With `--keep-open N` the batches run through one `OpenCopies` (the partition stays open
between batches); `--then-wait` then prints `waiting` and sleeps with it kept open.
With `--ttl` the partition also has a TTL store "ttl" whose clock is 10 ms per batch from
batch 2 on (it does not move before: those batches' entries are written at its first
time, 20) and that deletes at most `TTL_LIMIT` expired entries per batch (its model:
`TtlReference`).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import Any

import pyarrow.fs as pafs

from spark_statestore import Stores, ThreadCache
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources
from spark_statestore.partition.open_copies import OpenCopies
from ttl_reference import TtlReference
from txn_workload import apply_ops, state_of

__all__ = ["apply_ops", "state_of"]  # re-exported for the tests that drive batches

RETENTION = 120
SIZE = 10
SPECS = [StoreSpec.key_value("kv"), StoreSpec.window("win", RETENTION, SIZE, segment_interval=40)]
TTL, TTL_LIMIT = 25, 3
TTL_SPECS = SPECS + [StoreSpec.key_value("ttl", ttl=TTL)]


def ttl_ops(seed: int, batch: int) -> list[tuple[bytes, bytes | None]]:
    """The TTL store's writes in a batch (its own random stream: the others' stay the same)."""
    rng = random.Random(seed * 104729 + batch)
    return [
        (b"t%02d" % rng.randrange(30), None if rng.random() < 0.15 else rng.randbytes(4))
        for _ in range(rng.randint(0, 12))
    ]


def ttl_clock(batch: int) -> int | None:
    """The TTL store's clock in `batch` (None: it does not move)."""
    return batch * 10 if batch >= 2 else None


def ttl_expected(seed: int, last_batch: int) -> tuple:
    """The TTL store's live entries and stored keys after batches 0..last_batch."""
    model = TtlReference(TTL, TTL_LIMIT)
    for batch in range(last_batch + 1):
        model.advance(ttl_clock(batch) or -1)
        for key, value in ttl_ops(seed, batch):
            model.put(key, value)
    return model.items(), sorted(model.stored)


def ttl_state(store: Any) -> tuple:
    return list(store.all()), sorted(k[1:] for k, _ in store.inner.all() if k[:1] == b"\x00")


def batch_ops(seed: int, batch: int) -> list[tuple]:
    rng = random.Random(seed * 7919 + batch)
    ops: list[tuple] = []
    for _ in range(rng.randint(0, 60)):
        key = b"k%02d" % rng.randrange(40)
        r = rng.random()
        if r < 0.5:
            ops.append(("kv", key, rng.randbytes(rng.randint(1, 12))))
        elif r < 0.65:
            ops.append(("kv", key, None))
        else:
            start = max(0, batch * 10 + rng.randint(-150, 10))
            ops.append(("win", key, None if rng.random() < 0.1 else rng.randbytes(6), start))
    return ops


def expected(seed: int, last_batch: int) -> tuple:
    kv = Stores.in_memory_key_value_store("kv")
    win = Stores.in_memory_window_store("win", RETENTION, SIZE)
    for batch in range(last_batch + 1):
        apply_ops(batch_ops(seed, batch), kv, win)
    return state_of(kv, win)


def commit_log(checkpoint: str) -> str:
    return os.path.join(checkpoint, "commits.log")


def spark_commit(checkpoint: str, batch: int) -> None:
    """Batch `batch` in Spark's commit log (`commits/<batch>`), as Spark's driver writes it:
    what readers take as committed, and what an attempt's prepare is refused after."""
    os.makedirs(os.path.join(checkpoint, "commits"), exist_ok=True)
    with open(os.path.join(checkpoint, "commits", str(batch)), "w") as f:
        f.write("v1\n{}\n")


def last_committed(checkpoint: str) -> int:
    try:
        with open(commit_log(checkpoint)) as f:
            lines = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return -1
    return int(lines[-1]) if lines else -1


def partition_state(
    checkpoint: str,
    local_dir: str,
    partition: int = 0,
    *,
    cache: ThreadCache | None = None,
    open_copies: OpenCopies | None = None,
    filesystem: Any = None,
    ttl: bool = False,
    **options: Any,
) -> PartitionState:
    """The workload's partition state; `options`: `PartitionOptions` fields."""
    options.setdefault("retention_grace_seconds", 0)
    resources = WorkerResources(local_dir, cache=cache, open_copies=open_copies)
    specs = SPECS
    if ttl:
        specs = TTL_SPECS
        options["ttl_expiry_limit"] = TTL_LIMIT
    return PartitionState(checkpoint, partition, specs, resources, PartitionOptions(**options), filesystem=filesystem)


def run_batch(state: PartitionState, seed: int, batch: int, checkpoint: str) -> None:
    """One batch as a Spark task runs it, then the driver's commit."""
    state.open(batch)
    try:
        if "ttl" in state.stores:
            state.advance_clocks(ttl_clock(batch), None)
            state.store("ttl").put_all(ttl_ops(seed, batch))
        apply_ops(batch_ops(seed, batch), state.store("kv"), state.store("win"))
        state.prepare()
    finally:
        state.close()
    with open(commit_log(checkpoint), "a") as f:
        f.write(f"{batch}\n")
        f.flush()
        os.fsync(f.fileno())


def run(checkpoint: str, local_dir: str, batches: int, seed: int = 1, **kwargs) -> list[bool]:
    """Run (or go on running) the batches up to `batches` - 1 that did not commit yet;
    returns, per batch run, whether it found its copy kept open."""
    kept = []
    for batch in range(last_committed(checkpoint) + 1, batches):
        state = partition_state(checkpoint, local_dir, **kwargs)
        run_batch(state, seed, batch, checkpoint)
        state.wait_for_snapshots()
        kept.append(state.metrics.kept_open)
    return kept


def read_state(checkpoint: str, local_dir: str, **kwargs) -> tuple:
    """The state a reader opening the next batch sees."""
    state = partition_state(checkpoint, local_dir, **kwargs)
    state.open(last_committed(checkpoint) + 1)
    try:
        if "ttl" in state.stores:
            return state_of(state.store("kv"), state.store("win")) + ttl_state(state.store("ttl"))
        return state_of(state.store("kv"), state.store("win"))
    finally:
        state.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("local_dir")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--batches", type=int, required=True)
    parser.add_argument("--snapshot-interval", type=int, default=4)
    parser.add_argument("--retain", type=int, default=6)
    parser.add_argument("--cache-bytes", type=int, default=-1)
    parser.add_argument("--limit", type=int, default=-1)
    parser.add_argument("--apply-chunk-bytes", type=int, default=4 << 20)
    parser.add_argument("--keep-open", type=int, default=0)
    parser.add_argument("--then-wait", action="store_true")
    parser.add_argument("--ttl", action="store_true")
    args = parser.parse_args()
    cache = ThreadCache(args.cache_bytes) if args.cache_bytes >= 0 else None
    open_copies = OpenCopies(args.keep_open, 3600) if args.keep_open else None
    while (batch := last_committed(args.checkpoint) + 1) < args.batches:
        state = partition_state(
            args.checkpoint,
            args.local_dir,
            snapshot_interval=args.snapshot_interval,
            min_batches_to_retain=args.retain,
            cache=cache,
            uncommitted_max_bytes=args.limit,
            apply_chunk_bytes=args.apply_chunk_bytes,
            open_copies=open_copies,
            ttl=args.ttl,
        )
        run_batch(state, args.seed, batch, args.checkpoint)
        state.wait_for_snapshots()
        print(f"committed {batch}", flush=True)
    if args.then_wait:
        print("waiting", flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    main()


class LocalAsObjectStore(pafs.FileSystemHandler):
    """The local filesystem as `DurableDir` sees an object store (puts, no renames, no
    link checks): wrap it in `pafs.PyFileSystem`; a subclass changes what it reports
    (`info`) or watches what is asked."""

    def __init__(self) -> None:
        self.fs = pafs.LocalFileSystem()

    def info(self, info: pafs.FileInfo) -> pafs.FileInfo:
        return info

    def get_type_name(self): return "local-as-object-store"
    def normalize_path(self, path): return path
    def get_file_info(self, paths): return [self.info(i) for i in self.fs.get_file_info(paths)]
    def get_file_info_selector(self, selector): return [self.info(i) for i in self.fs.get_file_info(selector)]
    def create_dir(self, path, recursive): self.fs.create_dir(path, recursive=recursive)
    def delete_dir(self, path): self.fs.delete_dir(path)
    def delete_dir_contents(self, path, missing_dir_ok=False): self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)
    def delete_root_dir_contents(self): raise NotImplementedError
    def delete_file(self, path): self.fs.delete_file(path)
    def move(self, src, dest): self.fs.move(src, dest)
    def copy_file(self, src, dest): self.fs.copy_file(src, dest)
    def open_input_stream(self, path): return self.fs.open_input_stream(path)
    def open_input_file(self, path): return self.fs.open_input_file(path)
    def open_output_stream(self, path, metadata): return self.fs.open_output_stream(path)
    def open_append_stream(self, path, metadata): return self.fs.open_append_stream(path)
