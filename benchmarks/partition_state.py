"""Durable partition state (DESIGN.md's protocol), in one run.

1. Latency per version (open = apply the previous changelog, 10k changes, prepare =
   write and publish the changelog, close) with 1M and with 10M keys of state, after the
   bulk load's compactions settled: it must not grow with the size of the state.
2. Restore on a new executor: from a snapshot plus 10 changelogs, against replaying the
   whole history (100 versions of 10k changes) with no snapshot.
3. Changelog bytes per change.
4. Applying one changelog of 10k changes to a database of 1M keys, format 3 (blocks of
   columns, written now) against format 2 (interleaved records, still read): the
   per-change work of every open and of every restore.

    python benchmarks/partition_state.py [--big-keys N] [--changes N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

from spark_statestore.checkpoint.changelog import Changelog  # noqa: E402
from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources  # noqa: E402
from spark_statestore.txn import TransactionalDatabase  # noqa: E402
from spark_statestore.stores.rocksdb import RocksDatabase  # noqa: E402

SPECS = [StoreSpec.key_value("state", cached=False)]


def _state(checkpoint: str, local: str, **options) -> PartitionState:
    return PartitionState(checkpoint, 0, SPECS, WorkerResources(local), PartitionOptions(**options))


def _key(i: int) -> bytes:
    return i.to_bytes(8, "big")


def load(checkpoint: str, local: str, keys: int) -> None:
    """Batch 0 writes `keys` keys; batch 1 applies them (and changes nothing). Then the
    database is compacted, so that the measured versions see a settled state rather than
    the compactions a bulk load sets off."""
    for batch in (0, 1):
        state = _state(checkpoint, local, snapshot_interval=10**9)
        state.open(batch)
        if batch == 0:
            store = state.store("state")
            value = b"v" * 16
            for i in range(keys):
                store.put(_key(i), value)
        state.prepare()
        state.close()
    db = RocksDatabase(state.local.db_path, wal=False, replayable=True)
    for name in db.column_family_names():
        db.column_family(name).compact_range(None, None)
    db.close()


def per_version_latency(checkpoint: str, local: str, keys: int, changes: int, versions: int = 12) -> dict:
    rng = random.Random(keys)
    timings = []
    bytes_per_change = 0.0
    for batch in range(2, versions + 2):
        state = _state(checkpoint, local, snapshot_interval=10**9)
        started = time.perf_counter()
        state.open(batch)
        opened = time.perf_counter()
        store = state.store("state")
        for _ in range(changes):
            store.put(_key(rng.randrange(keys)), rng.randbytes(16))
        written = time.perf_counter()
        metrics = state.prepare()
        state.close()
        closed = time.perf_counter()
        if batch > 2:  # batch 2 has no changelog of 10k changes to apply yet
            timings.append((opened - started, closed - written))
        bytes_per_change = metrics.changelog_bytes / metrics.rows_written
    timings.sort(key=sum)
    median = timings[len(timings) // 2]
    return {"open": median[0], "prepare_close": median[1], "total": sum(median), "bytes_per_change": bytes_per_change}


def history(checkpoint: str, local: str, versions: int, changes: int, keys: int, interval: int) -> None:
    rng = random.Random(1)
    for batch in range(versions):
        state = _state(checkpoint, local, snapshot_interval=interval, min_batches_to_retain=1000)
        state.open(batch)
        store = state.store("state")
        for _ in range(changes):
            store.put(_key(rng.randrange(keys)), rng.randbytes(16))
        state.prepare()
        state.close()
        state.wait_for_snapshots()


def restore_seconds(checkpoint: str, workdir: str, version: int) -> tuple[float, int]:
    fresh = tempfile.mkdtemp(dir=workdir)
    state = _state(checkpoint, fresh, snapshot_interval=10**9)
    started = time.perf_counter()
    state.open(version + 1)
    seconds = time.perf_counter() - started
    applied = state.metrics.changelogs_applied
    state.close()
    shutil.rmtree(fresh, ignore_errors=True)
    return seconds, applied


def _as_format_2(path: str, out_path: str) -> None:
    """The changelog at `path` rewritten with format 2's interleaved records (same header,
    same records, a valid trailer)."""
    changelog = Changelog(path)
    index = {name: i for i, name in enumerate(changelog.stores)}
    record = struct.Struct(">BHII")
    body = [record.pack(2, index[s], len(lo), len(hi)) + lo + hi for s, spans in changelog.ranges().items() for lo, hi in spans]
    body += [record.pack(1 if v is not None else 0, index[s], len(k), len(v or b"")) + k + (v or b"")
             for s, k, v in changelog.entries()]
    raw = changelog.header.to_json()
    head = struct.pack(">4sHI", b"SSCL", 2, len(raw)) + raw + b"".join(body)
    ident = int.from_bytes(hashlib.blake2b(head, digest_size=8).digest(), "big") & ((1 << 63) - 1) or 1
    end = struct.pack(">4sQQ", b"END!", len(body), ident)
    with open(out_path, "wb") as f:
        f.write(head + end + struct.pack(">I", zlib.crc32(end, zlib.crc32(head))))


def apply_formats(workdir: str, changes: int) -> tuple[float, float]:
    """Median seconds to verify and apply one changelog of `changes` changes to a database of
    1M keys, in format 3 and in format 2 (alternating, 15 times each)."""
    checkpoint, local = os.path.join(workdir, "fmt-ckpt"), os.path.join(workdir, "fmt-local")
    load(checkpoint, local, 1_000_000)
    rng = random.Random(7)
    state = _state(checkpoint, local, snapshot_interval=10**9)
    state.open(2)
    store = state.store("state")
    for _ in range(changes):
        store.put(_key(rng.randrange(1_000_000)), rng.randbytes(16))
    state.prepare()
    state.close()
    v3 = state.local.changelog(2)
    v2 = os.path.join(workdir, "2.format2.changelog")
    _as_format_2(v3, v2)
    db = TransactionalDatabase(os.path.join(workdir, "fmt-db"), wal=False, replayable=True)
    db.key_value_store("state")
    db.replay_blocks({}, [("state", [_key(i) for i in range(1_000_000)], [b"v" * 16] * 1_000_000)], {})
    timings: dict[str, list[float]] = {v3: [], v2: []}
    for _ in range(15):
        for path in (v3, v2):
            started = time.perf_counter()
            changelog = Changelog(path)
            db.replay_blocks(changelog.ranges(), changelog.write_blocks(), {"version": 2})
            timings[path].append(time.perf_counter() - started)
    db.close()
    return statistics.median(timings[v3]), statistics.median(timings[v2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-keys", type=int, default=10_000_000)
    parser.add_argument("--changes", type=int, default=10_000)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-partition-")
    try:
        rows = []
        results = {}
        for keys in sorted({1_000_000, args.big_keys}):
            checkpoint = os.path.join(workdir, f"ckpt-{keys}")
            local = os.path.join(workdir, f"local-{keys}")
            started = time.perf_counter()
            load(checkpoint, local, keys)
            load_seconds = time.perf_counter() - started
            r = per_version_latency(checkpoint, local, keys, args.changes)
            results[keys] = r
            rows.append([f"{keys:,}", r["open"] * 1000, r["prepare_close"] * 1000, r["total"] * 1000, load_seconds])
            shutil.rmtree(checkpoint, ignore_errors=True)
            shutil.rmtree(local, ignore_errors=True)
        print(f"1. latency per version with {args.changes:,} changes (median of 10 versions)")
        print_table(["state keys", "open ms", "prepare+close ms", "total ms", "load s"], rows)

        restore_rows = []
        for label, interval in (("snapshot + 10 changelogs", 90), ("whole history, no snapshot", 10**9)):
            checkpoint = os.path.join(workdir, f"hist-{interval}")
            history(checkpoint, os.path.join(workdir, f"hl-{interval}"), 101, args.changes, 1_000_000, interval)
            seconds, applied = restore_seconds(checkpoint, workdir, 100)
            restore_rows.append([label, applied, seconds])
        print(f"\n2. restore of version 100 on a new executor (101 versions of {args.changes:,} changes)")
        print_table(["from", "changelogs applied", "seconds"], restore_rows)
        print(f"restore speed-up from the snapshot: {restore_rows[1][2] / restore_rows[0][2]:.1f}x")
        print(f"\n3. changelog bytes per change (8-byte keys, 16-byte values): {results[1_000_000]['bytes_per_change']:.1f}")
        v3, v2 = apply_formats(workdir, args.changes)
        print(f"\n4. applying one changelog of {args.changes:,} changes to 1M keys: format 3 {v3 * 1000:.1f} ms, "
              f"format 2 {v2 * 1000:.1f} ms (format 2 / format 3 = {v2 / v3:.2f})")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    small, big = results[1_000_000]["total"], results[max(results)]["total"]
    print(f"headline: commit latency 1M/10M keys = {small / big:.2f}")


if __name__ == "__main__":
    main()
