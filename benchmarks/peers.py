"""spark_statestore against its Python peer, Quix Streams, at the store level, in one run.

Both sides run the same workloads on RocksDB (through rocksdict), in this process,
without Kafka: Quix's store partitions are opened directly with no changelog producer,
and their transactions are committed with `prepare()` + `flush(changelog_offset)`, which
writes the transaction's changes and an offset in one RocksDB write batch, as
`db.commit(offsets)` does on the spark_statestore side.

1. puts: distinct random 16-byte keys, 48-byte values, a commit every 10k writes;
2. random gets of committed keys (reads through a transaction on both sides);
3. read-modify-write counters, keys Zipf(1.1) over 10k keys, a commit every 10k;
4. windowed counts: tumbling windows, a count per key per window (get + put through the
   windowed APIs), closed windows emitted once and then expired, a commit every 10k.

Serialization (the cheapest fair setting): workloads 1-3 use raw bytes on both sides
(Quix `get_bytes`/`set_bytes` with the empty prefix, so the RocksDB keys are the same
bytes; counters are 8-byte big-endian on both sides). Windowed counts: Quix's windowed
API serializes window values and its timestamp metadata with its `dumps` (orjson by
default, kept); spark_statestore window stores take bytes (8-byte big-endian counts).

Results are checked: final counters, emitted window counts and live window counts must
be equal on both sides (and equal to a plain-Python count), or the script exits 1.

    python benchmarks/peers.py [--ops N] [--repeats R] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import math
import os
import pstats
import random
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table
from sessions import compare as compare_sessions
from sessions import QUIX_EVENTS, ours_sessions, quix_sessions, session_events

from spark_statestore import Stores

try:
    with warnings.catch_warnings():  # authlib (a quixstreams dependency) warns at import
        warnings.showwarning = lambda *args, **kwargs: None  # its own "always" filter wins
        import quixstreams
        from quixstreams.state.rocksdb import RocksDBOptions, RocksDBStorePartition
        from quixstreams.state.rocksdb.windowed.partition import WindowedRocksDBStorePartition
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit(
        "benchmarks/peers.py needs the package 'quixstreams' (the peer it compares with); "
        "install the benchmark extras: pip install -e '.[bench]'"
    )

VALUE = b"x" * 48
PER_COMMIT = 10_000
# Quix defaults except the compression, set to RocksDB's default (snappy), which
# spark_statestore uses; open retries off (every directory is fresh).
QUIX_OPTIONS = RocksDBOptions(compression_type="snappy", open_max_retries=0)

DIFFERENCES = """\
What differs (both sides: RocksDB through rocksdict, WAL on, no fsync per write):
* durability: a commit is one RocksDB write batch with the write-ahead log on and
  sync=false on both sides (spark_statestore db.commit(offsets); Quix flush(offset)), so
  a committed batch survives a process kill, not an OS crash or power loss. Quix sets
  use_fsync (fsync instead of fdatasync for SST/MANIFEST files): no per-commit cost.
  Quix's durability in production is its Kafka changelog (produced at prepare(), not
  measured here: no producer); spark_statestore's is the checkpointed changelog/snapshot
  of the partition state (not measured here either).
* commit: both write the transaction's pending changes and one offset key in one atomic
  batch. spark_statestore sorts the buffer (a sorted overlay) and bounds its memory
  (spills to a staging column family past uncommitted_max_bytes, 64 MiB, not reached
  here); Quix's update cache is a dict per column family and prefix, unbounded.
* serialization: raw bytes on both sides for puts/gets/counters (same RocksDB keys).
  Windowed: Quix's windowed API takes Python values and serializes window values and its
  per-key timestamp metadata with dumps (orjson, kept); spark_statestore window stores
  take bytes. This cannot be matched: Quix stores its timestamp metadata through dumps.
* windowed layout and expiry: Quix keys windows by key|start|end and expires per key
  (expire_windows: a range scan of the key's windows on each record, each closed window
  returned once and deleted); spark_statestore keys by start|key, expires a segment at a
  time with one delete_range as stream time advances, and the benchmark emits closed
  windows with one fetch_all per closed window start.
* caching: no record cache on either side (spark_statestore's KIP-63 cache is off;
  Quix has none); both read their own writes from the transaction buffer. RocksDB: Quix
  64 MiB memtables, 1 GiB shared block cache, bloom filters, snappy (set here; Quix's
  default is lz4); spark_statestore 8 MiB memtables (a commit's insert costs less in a
  smaller skiplist; RocksDB flushes in the background), the default block cache, bloom
  filters, snappy. Quix's data fits in its memtables; ours is flushed once or twice, so our
  gets read SST files through the filters (spark_statestore/stores/rocksdb_options.py)."""


# -- data ------------------------------------------------------------------------------


def random_keys(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(count)]


def zipf_keys(count: int, keys: int, s: float, seed: int = 3) -> list[bytes]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1) ** s
    ranks = rng.choice(keys, size=count, p=weights / weights.sum())
    names = [b"user-%06d" % i for i in range(keys)]
    return [names[r] for r in ranks]


def window_events(count: int, keys: int, step_ms: int, seed: int = 5) -> list[tuple[bytes, int]]:
    """`count` (key, timestamp) events in time order, keys uniform over `keys`."""
    rng = random.Random(seed)
    names = [b"sensor-%05d" % i for i in range(keys)]
    return [(names[rng.randrange(keys)], 1_000_000 + i * step_ms) for i in range(count)]


def i8(n: int) -> bytes:
    return n.to_bytes(8, "big")


def u8(raw: bytes | None) -> int:
    return 0 if raw is None else int.from_bytes(raw, "big")


# -- spark_statestore ------------------------------------------------------------------


def ours_puts(path: str, keys: list[bytes]) -> float:
    db = Stores.persistent_database(path)
    store = db.key_value_store("kv")
    put = store.put
    start = time.perf_counter()
    for i, key in enumerate(keys, 1):
        put(key, VALUE)
        if i % PER_COMMIT == 0:
            db.commit({"input-0": i})
    db.commit({"input-0": len(keys)})
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def ours_gets(path: str, lookups: list[bytes]) -> tuple[float, int]:
    db = Stores.persistent_database(path)
    get = db.key_value_store("kv").get
    start = time.perf_counter()
    found = 0
    for key in lookups:
        if get(key) is not None:
            found += 1
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed, found


def ours_counters(path: str, stream: list[bytes]) -> tuple[float, dict[bytes, int]]:
    db = Stores.persistent_database(path)
    store = db.key_value_store("counts")
    get, put = store.get, store.put
    start = time.perf_counter()
    for i, key in enumerate(stream, 1):
        raw = get(key)
        put(key, ((0 if raw is None else int.from_bytes(raw, "big")) + 1).to_bytes(8, "big"))
        if i % PER_COMMIT == 0:
            db.commit({"input-0": i})
    db.commit({"input-0": len(stream)})
    elapsed = time.perf_counter() - start
    counts = {k: u8(v) for k, v in store.all()}
    db.close()
    return elapsed, counts


def ours_windows(
    path: str, events: list[tuple[bytes, int]], size: int, grace: int
) -> tuple[float, dict, dict]:
    """Count per key and window; emit each window once it closes (start <= t - grace -
    size), with one `fetch_all` per closed window start; retention keeps closed windows
    one more window size, then stream time expires them."""
    db = Stores.persistent_database(path)
    win = db.window_store("counts", 2 * size + grace, size)
    get, put, fetch_all = win.get, win.put, win.fetch_all
    emitted: dict[tuple[bytes, int], int] = {}
    last_emitted = -1
    start = time.perf_counter()
    for i, (key, ts) in enumerate(events, 1):
        closed = ts - grace - size
        if closed > last_emitted:
            closed -= closed % size
            if closed > last_emitted:
                for windowed, value in fetch_all(last_emitted + 1, closed):
                    emitted[(windowed.key, windowed.window.start)] = int.from_bytes(value, "big")
                last_emitted = closed
        ws = ts - ts % size
        raw = get(key, ws)
        put(key, ((0 if raw is None else int.from_bytes(raw, "big")) + 1).to_bytes(8, "big"), ws)
        if i % PER_COMMIT == 0:
            db.commit({"input-0": i})
    db.commit({"input-0": len(events)})
    elapsed = time.perf_counter() - start
    live = {(w.key, w.window.start): u8(v) for w, v in win.all()}
    db.close()
    return elapsed, emitted, live


# -- Quix Streams ----------------------------------------------------------------------


def quix_commit(tx: Any, offset: int) -> None:
    tx.prepare(processed_offsets={"input-0": offset})
    tx.flush(changelog_offset=offset)


def quix_puts(path: str, keys: list[bytes]) -> float:
    part = RocksDBStorePartition(path, options=QUIX_OPTIONS)
    tx = part.begin()
    start = time.perf_counter()
    for i, key in enumerate(keys, 1):
        tx.set_bytes(key, VALUE, b"")
        if i % PER_COMMIT == 0:
            quix_commit(tx, i)
            tx = part.begin()
    quix_commit(tx, len(keys))
    elapsed = time.perf_counter() - start
    part.close()
    return elapsed


def quix_gets(path: str, lookups: list[bytes]) -> tuple[float, int]:
    part = RocksDBStorePartition(path, options=QUIX_OPTIONS)
    get = part.begin().get_bytes
    start = time.perf_counter()
    found = 0
    for key in lookups:
        if get(key, b"") is not None:
            found += 1
    elapsed = time.perf_counter() - start
    part.close()
    return elapsed, found


def quix_counters(path: str, stream: list[bytes]) -> tuple[float, dict[bytes, int]]:
    part = RocksDBStorePartition(path, options=QUIX_OPTIONS)
    tx = part.begin()
    start = time.perf_counter()
    for i, key in enumerate(stream, 1):
        raw = tx.get_bytes(key, b"")
        tx.set_bytes(key, ((0 if raw is None else int.from_bytes(raw, "big")) + 1).to_bytes(8, "big"), b"")
        if i % PER_COMMIT == 0:
            quix_commit(tx, i)
            tx = part.begin()
    quix_commit(tx, len(stream))
    elapsed = time.perf_counter() - start
    tx = part.begin()
    counts = {k: u8(tx.get_bytes(k, b"")) for k in set(stream)}
    part.close()
    return elapsed, counts


def quix_windows(
    path: str, events: list[tuple[bytes, int]], size: int, grace: int
) -> tuple[float, dict, dict]:
    """Quix's tumbling-window aggregation at the state level, as its default (per-key)
    closing strategy does it: get_window, update_window, expire_windows of the key."""
    part = WindowedRocksDBStorePartition(path, options=QUIX_OPTIONS)
    tx = part.begin()
    emitted: dict[tuple[bytes, int], int] = {}
    start = time.perf_counter()
    for i, (key, ts) in enumerate(events, 1):
        ws = ts - ts % size
        count = tx.get_window(ws, ws + size, prefix=key, default=0)
        tx.update_window(ws, ws + size, count + 1, timestamp_ms=ts, prefix=key)
        for (w_start, _), value, _, _ in tx.expire_windows(max_start_time=ts - grace - size, prefix=key):
            emitted[(key, w_start)] = value
        if i % PER_COMMIT == 0:
            quix_commit(tx, i)
            tx = part.begin()
    quix_commit(tx, len(events))
    elapsed = time.perf_counter() - start
    tx = part.begin()
    last = events[-1][1]
    live = {}
    for key in {k for k, _ in events}:
        for (w_start, _), value, _ in tx.get_windows(last - grace - size, last, prefix=key):
            live[(key, w_start)] = value
    part.close()
    return elapsed, emitted, live


# -- checks ----------------------------------------------------------------------------


def fail(message: str) -> None:
    print(f"RESULTS DIFFER: {message}", file=sys.stderr)
    sys.exit(1)


def check_windows(events, size, grace, ours_emitted, ours_live, quix_emitted, quix_live) -> None:
    expected = Counter((key, ts - ts % size) for key, ts in events)
    last = events[-1][1]
    for side, emitted in (("spark_statestore", ours_emitted), ("quix", quix_emitted)):
        wrong = [w for w, c in emitted.items() if expected[w] != c]
        if wrong:
            fail(f"{side} emitted {len(wrong)} windows with wrong counts, e.g. {wrong[0]}")
    closed = {w for w in expected if w[1] <= last - grace - size}
    if set(ours_emitted) != closed:
        fail(f"spark_statestore emitted {len(ours_emitted)} windows, {len(closed)} closed")
    if not set(quix_emitted) <= closed or (closed and not quix_emitted):
        fail("quix emitted windows that are not closed, or none")
    # Windows that no side can have closed: both must hold the full count.
    open_ = {w: c for w, c in expected.items() if w[1] > last - grace - size}
    for side, live in (("spark_statestore", ours_live), ("quix", quix_live)):
        got = {w: live.get(w) for w in open_}
        if got != open_:
            fail(f"{side} open window counts differ from the expected counts")
    # Closed windows the ours side still retains must be exactly closed ones, correct.
    for w, c in ours_live.items():
        if expected[w] != c:
            fail(f"spark_statestore retains window {w} with count {c}, expected {expected[w]}")


# -- driver ----------------------------------------------------------------------------


def run(args: argparse.Namespace, workdir: str) -> list[tuple[str, float, float]]:
    n = args.ops
    put_keys = random_keys(n)
    rng = random.Random(2)
    lookups = [put_keys[rng.randrange(n)] for _ in range(n)]
    stream = zipf_keys(n, args.keys, args.zipf)
    events = window_events(n, args.window_keys, args.step_ms)
    size, grace = args.window_ms, args.grace_ms
    best: dict[str, list[float]] = {}
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        return os.path.join(workdir, str(counter[0]))

    def record(name: str, ours: float, quix: float) -> None:
        cur = best.setdefault(name, [math.inf, math.inf])
        cur[0], cur[1] = min(cur[0], ours), min(cur[1], quix)

    for _ in range(args.repeats):
        # 1 and 2: puts, then gets over what the puts committed
        o_path, q_path = fresh(), fresh()
        gc.collect()
        o = ours_puts(o_path, put_keys)
        gc.collect()
        q = quix_puts(q_path, put_keys)
        record("puts, commit every 10k", o, q)
        gc.collect()
        o, o_found = ours_gets(o_path, lookups)
        gc.collect()
        q, q_found = quix_gets(q_path, lookups)
        if o_found != n or q_found != n:
            fail(f"gets found {o_found} (spark_statestore) and {q_found} (quix) of {n} committed keys")
        record("random gets (committed)", o, q)
        # 3: counters
        gc.collect()
        o, o_counts = ours_counters(fresh(), stream)
        gc.collect()
        q, q_counts = quix_counters(fresh(), stream)
        if o_counts != q_counts or o_counts != Counter(stream):
            fail("final counters differ")
        record(f"counters, Zipf({args.zipf}) over {args.keys:,} keys, commit every 10k", o, q)
        # 4: windowed counts
        gc.collect()
        o, o_emitted, o_live = ours_windows(fresh(), events, size, grace)
        gc.collect()
        q, q_emitted, q_live = quix_windows(fresh(), events, size, grace)
        check_windows(events, size, grace, o_emitted, o_live, q_emitted, q_live)
        common = set(o_emitted) & set(q_emitted)
        if len(common) != len(q_emitted) or any(o_emitted[w] != q_emitted[w] for w in common):
            fail("emitted window counts differ")
        record(f"windowed counts ({size // 1000}s tumbling, expiry), commit every 10k", o, q)
    return [(name, n / o, n / q) for name, (o, q) in best.items()]


def profile(args: argparse.Namespace, workdir: str) -> None:
    """cProfile of the spark_statestore side, per workload: our functions by own time."""
    n = args.ops
    put_keys = random_keys(n)
    stream = zipf_keys(n, args.keys, args.zipf)
    events = window_events(n, args.window_keys, args.step_ms)
    kv = os.path.join(workdir, "p-kv")
    jobs: list[tuple[str, Callable[[], object]]] = [
        ("puts", lambda: ours_puts(kv, put_keys)),
        ("gets", lambda: ours_gets(kv, put_keys)),
        ("counters", lambda: ours_counters(os.path.join(workdir, "p-c"), stream)),
        (
            "windows",
            lambda: ours_windows(os.path.join(workdir, "p-w"), events, args.window_ms, args.grace_ms),
        ),
    ]
    for name, job in jobs:
        prof = cProfile.Profile()
        prof.runcall(job)
        stats = pstats.Stats(prof)
        rows = []
        for (file, line, func), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
            if "spark_statestore" in file:
                rows.append((tottime, ncalls, f"{os.path.relpath(file)}:{line} {func}"))
        rows.sort(reverse=True)
        print(f"\nprofile {name} ({n:,} ops), spark_statestore functions by own time:")
        for tottime, ncalls, where in rows[:6]:
            print(f"  {tottime / n * 1e6:6.2f} us/op  {ncalls:>9,} calls  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=200_000, help="operations per workload")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per workload")
    parser.add_argument("--keys", type=int, default=10_000, help="counter keys")
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--window-keys", type=int, default=1_000)
    parser.add_argument("--window-ms", type=int, default=10_000)
    parser.add_argument("--grace-ms", type=int, default=1_000)
    parser.add_argument("--step-ms", type=int, default=2, help="event time between events")
    parser.add_argument("--profile", action="store_true", help="also cProfile the spark_statestore side")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-peers-")
    try:
        print(
            f"spark_statestore vs quixstreams {quixstreams.__version__}: {args.ops:,} ops per workload, "
            f"best of {args.repeats}, commit = one RocksDB write batch (WAL on, no fsync)"
        )
        rows = run(args, workdir)
        print()
        print_table(
            ["workload", "spark_statestore ops/s", "quix ops/s", "spark_statestore/quix"],
            [[name, o, q, o / q] for name, o, q in rows],
        )
        print()
        print(DIFFERENCES)
        if args.profile:
            profile(args, workdir)
        session_stream = session_events(args.ops, 20_000, 2)
        ours, handwritten = compare_sessions(session_stream, 5_000, args.repeats, workdir)
        head = session_stream[:QUIX_EVENTS]
        o_time, o_sessions = ours_sessions(os.path.join(workdir, "session-ours"), head, 5_000)
        q_time, q_sessions = quix_sessions(os.path.join(workdir, "session-quix"), head, 5_000)
        if o_sessions != q_sessions:
            fail("the session store and Quix session windows emitted different sessions")
        print(f"\nsessions (gap 5 s, 20,000 keys): session store {ours:,.0f} events/s, hand-written merge over a "
              f"key-value store {handwritten:,.0f} events/s: ratio {ours / handwritten:.2f}; Quix session windows "
              f"{len(head) / q_time:,.0f} events/s on the first {len(head):,} events: session store/Quix {q_time / o_time:.2f}")
        geo = math.exp(sum(math.log(o / q) for _, o, q in rows) / len(rows))
        print(f"\nspark_statestore/quix ops per second, geometric mean over workloads = {geo:.2f}")
        print(f"headline: worst spark_statestore/quix ops per second over workloads = {min(o / q for _, o, q in rows):.2f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
