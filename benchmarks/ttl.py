"""The cost of TTL expiry per batch at a large key count: the bounded deletion (the expiry
index walked from its start, at most `limit` entries per batch) against a full scan of
the store for expired entries, each as one batch's transaction and commit on the
transactional RocksDB store a partition uses.

The store is loaded with `--keys` entries whose expiries are spread evenly over
`--batches` batches (in the store's own layout, written as a changelog is applied), so
every batch has `keys / batches` newly expired entries: a backlog the bounded deletion
works off `limit` at a time while the expired entries stay invisible.

    python benchmarks/ttl.py [--keys N] [--batches B] [--limit L]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

from spark_statestore.stores.spec import StoreSpec  # noqa: E402
from spark_statestore.stores.ttl import CLOCK_KEY, ENTRY, INDEX, TtlKeyValueStore, time_bytes  # noqa: E402
from spark_statestore.txn.database import TransactionalDatabase  # noqa: E402

TTL = 1000
CHUNK = 500_000


def load(db: TransactionalDatabase, keys: int, batches: int) -> None:
    """`keys` entries of 16-byte values; key i expires in batch i % batches."""
    for lo in range(0, keys, CHUNK):
        ids = range(lo, min(keys, lo + CHUNK))
        expiry = [time_bytes((i % batches + 1) * TTL) for i in ids]
        names = [b"key%010d" % i for i in ids]
        entries = [ENTRY + n for n in names]
        index = sorted(INDEX + e + n for e, n in zip(expiry, names))
        blocks = [
            ("t", entries, [e + b"v" * 16 for e in expiry]),
            ("t", index, [b"\x01"] * len(index)),
            ("t", [CLOCK_KEY], [time_bytes(0)]),
        ]
        db.replay_blocks({}, blocks, {"loaded": lo})


def bounded(db: TransactionalDatabase, store: TtlKeyValueStore, now: int, limit: int) -> int:
    deleted = store.advance_time(now, limit)
    db.commit({"batch": now})
    return deleted


def full_scan(db: TransactionalDatabase, store: TtlKeyValueStore, now: int) -> int:
    """What expiry costs without an index: every entry read to find the expired ones."""
    store.advance_time(now, 0)
    inner, now_b, deleted = store.inner, time_bytes(now), 0
    for key, stored in inner.range(ENTRY, INDEX):
        if stored[:8] <= now_b:
            inner.put(key, None)
            deleted += 1
    db.commit({"batch": now})
    return deleted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--limit", type=int, default=10_000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-ttl-")
    try:
        spec = StoreSpec.key_value("t", ttl=TTL)
        db = TransactionalDatabase(os.path.join(root, "db"), wal=False, uncommitted_max_bytes=64 << 20)
        db.open_store(spec)
        started = time.perf_counter()
        load(db, args.keys, args.batches)
        load_seconds = time.perf_counter() - started
        store = TtlKeyValueStore(db.store("t"), spec.ttl)
        rows = []
        for batch in range(1, 4):  # three batches: each has keys / batches newly expired entries
            started = time.perf_counter()
            deleted = bounded(db, store, batch * TTL, args.limit)
            rows.append([f"bounded (limit {args.limit:,})", batch, deleted, time.perf_counter() - started])
        started = time.perf_counter()
        deleted = full_scan(db, store, 4 * TTL)
        rows.append(["full scan", 4, deleted, time.perf_counter() - started])
        print(f"{args.keys:,} keys loaded in {load_seconds:.1f} s; {args.keys // args.batches:,} expire per batch")
        print_table(["expiry", "batch", "deleted", "seconds"], rows)
        per_batch = min(r[3] for r in rows[:3])
        print(
            f"headline: full scan / bounded expiry per batch at {args.keys:,} keys = {rows[3][3] / per_batch:.0f}x "
            f"({rows[3][3]:.1f} s vs {per_batch * 1000:.0f} ms)"
        )
        db.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
