"""The record cache's cost on the per-partition batch path, cache off against on, in one run.

What a partition does in `benchmarks/steady_state.py`, without Spark: per micro-batch,
Arrow-sized batches of keys (grouped: each key once per batch) go through one typed
`get_all` and one `put_columns`, then the partition commits (the cache flushes first).
Both stores are transactional RocksDB stores; "on" puts the store behind a `ThreadCache`
of `--cache-bytes` (a task slot's share of the Spark benchmark's 64 MiB), as the
partition does. Workloads:

  kv       running count per key, `--keys` keys (every key written in every micro-batch)
  kv-hot   the same over 1/10 of the keys (all of them fit in the cache)
  window   count per key and 10 s tumbling window (event time advancing 60 s per
           micro-batch) in a store on the watermark clock (retention 10 s; the stream time
           moves to the micro-batch's watermark, its input's largest event time minus 10 s,
           after it): the windows a micro-batch's watermark closes are emitted with
           `fetch_all_columns`, as steady_state.py's window counts do

  scan     a forward read of the whole store (`all()`, `--keys` committed keys) with one
           key in 40 just written, single puts dirty in the cache: what a range read
           costs where the cache merges its entries with the store's (it re-opens past
           its last key when the cache moves under it, `CachingLayer._held`; nothing
           moves here, so this is the cost of being able to). Records per second

With the cache on and no listener (the partition's case without `emit_changes`), the bulk
calls pass the cache by (see `spark_statestore.cache.caching`). The `+changes` workloads set
a flush listener, as `emit_changes=True` does: then every call goes through the cache, which
de-duplicates the forwarded changes (one per key and commit); their "off" has no listener
and forwards nothing, so their ratio is what emitting changes costs, and they are left out
of the headline.

Each (workload, cache) pair runs `--batches` measured micro-batches after one warm-up, best
of `--repeats`, off and on alternating; the runs' final contents are checked equal. Rates
are rows per second of this process's CPU time (the machine is shared: wall time would
measure the neighbours too).

    python benchmarks/record_cache.py [--keys N] [--rows R] [--batches B] [--profile WORKLOAD]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

from spark_statestore import Serdes, Stores, ThreadCache  # noqa: E402

ARROW_BATCH = 10_000  # rows per Arrow batch, Spark's default maxRecordsPerBatch
WINDOW_MS, DELAY_MS = 10_000, 10_000


def micro_batches(batches: int, rows: int, keys: int, seed: int = 1) -> list[list[pa.Table]]:
    """Per micro-batch, its Arrow batches as (key, start, count) tables grouped by key and
    window start (event time advances 60 s per micro-batch)."""
    rng = np.random.default_rng(seed)
    names = np.array([f"key-{i:07d}" for i in range(keys)], dtype=object)
    out = []
    for b in range(batches):
        ts = b * 60_000 + rng.integers(0, 60_000, rows)
        key = names[rng.integers(0, keys, rows)]
        tables = []
        for lo in range(0, rows, ARROW_BATCH):
            t = pa.table({"key": pa.array(key[lo : lo + ARROW_BATCH], pa.string()), "start": ts[lo : lo + ARROW_BATCH] - ts[lo : lo + ARROW_BATCH] % WINDOW_MS})
            tables.append(t.group_by(["key", "start"]).aggregate([("key", "count")]))
        out.append(tables)
    return out


def kv_batch(store: Any, tables: list[pa.Table]) -> None:
    for t in tables:
        grouped = t.group_by("key").aggregate([("key_count", "sum")])
        keys = grouped.column("key")
        current = np.array([c or 0 for c in store.get_all(keys)], dtype=np.int64)
        store.put_columns(keys, current + grouped.column("key_count_sum").to_numpy())


def window_batch(store: Any, tables: list[pa.Table], watermark: int) -> int:
    """One micro-batch of window counts; returns the windows it emitted."""
    for t in tables:
        keys, starts = t.column("key"), t.column("start")
        current = np.array([c or 0 for c in store.get_all(keys, starts)], dtype=np.int64)
        store.put_columns(keys, current + t.column("key_count").to_numpy(), starts)
    emitted = len(store.fetch_all_columns(0, watermark - WINDOW_MS).keys) if watermark >= WINDOW_MS else 0
    store.advance_stream_time(watermark)  # what the end of a Spark batch does: the emitted windows expire
    return emitted


def open_store(kind: str, path: str, cache_bytes: int, changes: list | None) -> Any:
    """The typed store, behind a cache when `cache_bytes`, whose flushes extend `changes`
    (None: no listener, as in steady_state.py's partition functions, `emit_changes=False`)."""
    if kind == "window":
        raw: Any = Stores.persistent_window_store("windows", path, WINDOW_MS, WINDOW_MS, clock="external")
    else:
        raw = Stores.persistent_key_value_store("counts", path)
    if cache_bytes:
        raw = Stores.caching(raw, ThreadCache(cache_bytes), None if changes is None else changes.extend)
    return raw.typed(Serdes.string(), Serdes.int64())


def run(kind: str, path: str, data: list[list[pa.Table]], cache_bytes: int, profile: cProfile.Profile | None = None,
        changes: list | None = None) -> tuple[float, list]:
    """Rows per second over the micro-batches after the first, and the final contents."""
    store = open_store(kind, path, cache_bytes, changes)
    rows = 0
    elapsed = 0.0
    for i, tables in enumerate(data):
        if i == 1 and profile is not None:
            profile.enable()
        started = time.process_time()
        if kind == "window":  # the watermark of micro-batch i: what the ones before it saw, less the delay
            window_batch(store, tables, max(0, i * 60_000 - 1 - DELAY_MS) if i else 0)
        else:
            kv_batch(store, tables)
        store.commit({"batch": i})
        if i > 0:
            elapsed += time.process_time() - started
            rows += sum(int(np.sum(t.column("key_count").to_numpy())) for t in tables)
    if profile is not None:
        profile.disable()
    contents = list(store.all())
    store.close()
    return rows / elapsed, contents


def run_scan(path: str, keys: int, cache_bytes: int, scans: int) -> tuple[float, list]:
    """Records per second of `scans` forward reads of the whole (bytes) store after one
    warm-up, and the contents they read."""
    store: Any = Stores.persistent_key_value_store("counts", path)
    if cache_bytes:
        store = Stores.caching(store, ThreadCache(cache_bytes))
    names = [b"key-%07d" % i for i in range(keys)]
    store.put_columns(names, names)
    store.commit({"batch": 0})
    for name in names[::40]:
        store.put(name, b"new")  # a single put: dirty in the cache when there is one
    contents = list(store.all())
    started = time.process_time()
    for _ in range(scans):
        for _ in store.all():
            pass
    elapsed = time.process_time() - started
    store.close()
    return scans * len(contents) / elapsed, contents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=50_000, help="distinct keys of the partition")
    parser.add_argument("--rows", type=int, default=200_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=4, help="measured micro-batches (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cache-bytes", type=int, default=32 << 20)
    parser.add_argument(
        "--only", default="kv,kv-hot,window,kv+changes,window+changes,scan", help="comma-separated workloads"
    )
    parser.add_argument("--profile", default=None, help="profile WORKLOAD with the cache on instead of measuring")
    args = parser.parse_args()
    workloads = {
        "kv": ("kv", args.keys),
        "kv-hot": ("kv", max(1, args.keys // 10)),
        "window": ("window", args.keys),
        "kv+changes": ("kv", args.keys),
        "window+changes": ("window", args.keys),
        "scan": ("scan", args.keys),
    }
    workdir = tempfile.mkdtemp(prefix="bench-record-cache-")
    try:
        if args.profile:
            kind, keys = workloads[args.profile]
            profile = cProfile.Profile()
            run(kind, os.path.join(workdir, "p"), micro_batches(args.batches + 1, args.rows, keys), args.cache_bytes, profile)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            return
        rows, ratios = [], []
        for name in args.only.split(","):
            kind, keys = workloads[name]
            data = micro_batches(args.batches + 1, args.rows, keys) if kind != "scan" else []
            best = {0: 0.0, args.cache_bytes: 0.0}
            forwarded = None
            contents: dict[int, list] = {}
            listening = name.endswith("+changes")
            for r in range(args.repeats):
                for cache in best:
                    changes: list | None = [] if listening and cache else None
                    path = os.path.join(workdir, f"{name}-{r}-{cache}")
                    if kind == "scan":
                        rate, contents[cache] = run_scan(path, keys, cache, args.batches)
                    else:
                        rate, contents[cache] = run(kind, path, data, cache, None, changes)
                    best[cache] = max(best[cache], rate)
                    if changes is not None:
                        forwarded = len(changes)
            assert contents[0] == contents[args.cache_bytes], f"{name}: cache on and off stored different contents"
            ratio = best[args.cache_bytes] / best[0]
            if not listening and kind != "scan":  # the headline: the batch path
                ratios.append(ratio)
            writes = sum(t.num_rows for tables in data for t in tables)  # a put per grouped row
            rows.append([name, keys, best[0], best[args.cache_bytes], ratio, "" if forwarded is None else f"{forwarded / writes:.2f}"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.rows:,} rows per micro-batch, {args.batches} measured micro-batches, cache {args.cache_bytes >> 20} MiB")
    print_table(["workload", "keys", "rows/s cache off", "rows/s cache on", "on / off", "changes / puts"], rows)
    print(f"headline: cache on / cache off throughput (worst workload without a listener) = {min(ratios):.2f}")


if __name__ == "__main__":
    main()
