"""Typed stores against raw rocksdict doing the same serialization, side by side in one run.

The typed stores are the transactional RocksDB stores seen through `Serdes.string()` keys
and `Serdes.int64()` values (put loops commit every 10,000 writes, as in `stores.py`).
Each floor is raw rocksdict (`raw_mode`) on the same key layout, doing the serialization a
user would otherwise do by hand:

- keys: `key.encode("utf-8")`; values: `value.to_bytes(8, "big", signed=True)` on write,
  `int.from_bytes(raw, "big", signed=True)` (or `None` for a missing key) on read;
- key-value put: one `Rdict.put` per record; get: one `Rdict.get` per record; get_all: one
  multi-get `Rdict.get(list)` per 1,000 keys; put_all / put_columns: one `WriteBatch` per
  10,000 records (the columns given as two lists);
- window (key layout: 8-byte big-endian window start, then the key): put is one
  `Rdict.put(start + key, value)`; fetch (one key, all windows) seeks one iterator to
  `start + key` per window start, and fetch_range (a key range, all windows) seeks it to
  `start + first key` and reads the range, decoding each entry into `((key, window start),
  value)`; neither knows the window starts in advance, so a seek that lands in a later
  window, before the key, is followed by a second seek in that window (what the store does).

The ratio is floor throughput / typed throughput (1.0 = no overhead).

    python benchmarks/typed.py [--records N]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile

import rocksdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import best_time, print_table  # noqa: E402
from stores import COMMIT_EVERY, _ws, raw_rocksdict  # noqa: E402

from spark_statestore import Stores  # noqa: E402
from spark_statestore.serde import Serdes  # noqa: E402

CHUNK = 1000
ROUNDS = 5


def _enc(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


def _window_scan(it: rocksdict.RdictIter, low: bytes, high: bytes, t: int, t_to: int):
    """`(window start, stored key, value)` of the entries whose key part is in [low, high)
    in each window start of [t, t_to], by one seek of one iterator per window start (and
    one more where a seek lands in a later window, before its key range: the window
    starts are not known in advance)."""
    end = _ws(t_to + 1)
    while t <= t_to:
        it.seek(_ws(t) + low)
        if not it.valid() or it.key() >= end:
            return
        stored = it.key()
        w = int.from_bytes(stored[:8], "big")
        if w > t and stored[8:] < low:
            t = w
            continue
        upper = _ws(w) + high
        while it.valid() and stored < upper:
            yield w, stored, it.value()
            it.next()
            stored = it.key() if it.valid() else upper
        t = w + 1


class TypedBench:
    def __init__(self, records: int, workdir: str) -> None:
        rng = random.Random(11)
        self.workdir = workdir
        self.counter = 0
        self.keys = [f"user-{rng.randrange(10**9):09d}" for _ in range(records)]
        self.values = [rng.randrange(-(10**12), 10**12) for _ in range(records)]
        self.lookups = rng.sample(self.keys, min(records, 100_000))
        self.win_keys = [f"key-{i:05d}" for i in range(max(records // 100, 1))]
        self.win_starts = [i * 10 for i in range(100)]
        self.rows: list[list[object]] = []

    def path(self) -> str:
        self.counter += 1
        p = os.path.join(self.workdir, f"db{self.counter}")
        shutil.rmtree(p, ignore_errors=True)
        return p

    def compare(self, label: str, count: int, typed_fn, floor_fn, setup=None) -> None:
        """Best of `ROUNDS` timings each, typed and floor taking turns (so a change of
        load on the shared machine falls on both)."""
        t_typed = t_floor = float("inf")
        for _ in range(ROUNDS):
            t_typed = min(t_typed, best_time(typed_fn, repeats=1, setup=setup))
            t_floor = min(t_floor, best_time(floor_fn, repeats=1, setup=setup))
        self.rows.append([label, count / t_typed, count / t_floor, t_typed / t_floor])

    # -- key-value ------------------------------------------------------------------------

    def kv(self) -> None:
        keys, values, lookups = self.keys, self.values, self.lookups
        pairs = list(zip(keys, values))
        h: dict = {}

        def typed():
            return h["s"].typed(Serdes.string(), Serdes.int64())

        def reset():
            for v in (h.get("s"), h.get("f")):
                if v is not None:
                    v.close()
            h["s"] = Stores.persistent_key_value_store("kv", self.path())
            h["f"] = raw_rocksdict(self.path())

        def typed_put():
            store = typed()
            put, commit = store.put, store.commit
            for i, (k, v) in enumerate(pairs):
                put(k, v)
                if i % COMMIT_EVERY == COMMIT_EVERY - 1:
                    commit()
            commit()

        def floor_put():
            put = h["f"].put
            for k, v in pairs:
                put(k.encode("utf-8"), v.to_bytes(8, "big", signed=True))

        self.compare("kv put", len(pairs), typed_put, floor_put, setup=reset)
        reset()
        typed_put()
        floor_put()

        def typed_get():
            get = typed().get
            for k in lookups:
                get(k)

        def floor_get():
            get = h["f"].get
            for k in lookups:
                raw = get(k.encode("utf-8"))
                None if raw is None else int.from_bytes(raw, "big", signed=True)

        self.compare("kv get", len(lookups), typed_get, floor_get)

        chunks = [lookups[i : i + CHUNK] for i in range(0, len(lookups), CHUNK)]

        def typed_get_all():
            get_all = typed().get_all
            for chunk in chunks:
                get_all(chunk)

        def floor_get_all():
            get = h["f"].get
            for chunk in chunks:
                raws = get([k.encode("utf-8") for k in chunk])
                [None if r is None else int.from_bytes(r, "big", signed=True) for r in raws]

        self.compare(f"kv get_all ({CHUNK} keys)", len(lookups), typed_get_all, floor_get_all)

        batches = [(i, min(i + COMMIT_EVERY, len(pairs))) for i in range(0, len(pairs), COMMIT_EVERY)]

        def typed_put_all():
            store = typed()
            for lo, hi in batches:
                store.put_all(pairs[lo:hi])
                store.commit()

        def typed_put_columns():
            store = typed()
            for lo, hi in batches:
                store.put_columns(keys[lo:hi], values[lo:hi])
                store.commit()

        def floor_batches():
            db = h["f"]
            for lo, hi in batches:
                wb = rocksdict.WriteBatch(raw_mode=True)
                for k, v in zip(keys[lo:hi], values[lo:hi]):
                    wb.put(k.encode("utf-8"), v.to_bytes(8, "big", signed=True))
                db.write(wb)

        self.compare("kv put_all (10k pairs)", len(pairs), typed_put_all, floor_batches, setup=reset)
        self.compare("kv put_columns (10k rows)", len(pairs), typed_put_columns, floor_batches, setup=reset)
        for v in (h.get("s"), h.get("f")):
            v.close()

    # -- window ---------------------------------------------------------------------------

    def window(self) -> None:
        keys, starts = self.win_keys, self.win_starts
        count = len(keys) * len(starts)
        h: dict = {}

        def reset():
            for v in (h.get("s"), h.get("f")):
                if v is not None:
                    v.close()
            h["s"] = Stores.persistent_window_store("w", self.path(), 10_000, 10)
            h["f"] = raw_rocksdict(self.path())

        def typed():
            return h["s"].typed(Serdes.string(), Serdes.int64())

        def typed_put():
            store = typed()
            put, commit = store.put, store.commit
            n = 0
            for t in starts:
                for i, k in enumerate(keys):
                    put(k, i, t)
                    n += 1
                    if n % COMMIT_EVERY == 0:
                        commit()
            commit()

        def floor_put():
            put = h["f"].put
            for t in starts:
                ws = _ws(t)
                for i, k in enumerate(keys):
                    put(ws + k.encode("utf-8"), i.to_bytes(8, "big", signed=True))

        self.compare("window put", count, typed_put, floor_put, setup=reset)
        reset()
        typed_put()
        floor_put()

        fetch_keys = keys[:: max(len(keys) // 500, 1)]

        def typed_fetch():
            n = 0
            fetch = typed().fetch
            for k in fetch_keys:
                for _ in fetch(k, 0, 10_000):
                    n += 1
            return n

        def floor_fetch():
            n = 0
            it = h["f"].iter()
            for k in fetch_keys:
                part = k.encode("utf-8")
                for w, _, raw in _window_scan(it, part, part + b"\x00", 0, 10_000):
                    (w, int.from_bytes(raw, "big", signed=True))
                    n += 1
            return n

        assert typed_fetch() == floor_fetch() == len(fetch_keys) * len(starts)
        self.compare("window fetch (key, all windows)", len(fetch_keys) * len(starts), typed_fetch, floor_fetch)

        ranges = [(keys[i], keys[i + 9]) for i in range(0, len(keys) - 10, max(len(keys) // 50, 10))]

        def typed_fetch_range():
            n = 0
            fetch_range = typed().fetch_range
            for lo, hi in ranges:
                for _ in fetch_range(lo, hi, 0, 10_000):
                    n += 1
            return n

        def floor_fetch_range():
            n = 0
            it = h["f"].iter()
            for lo, hi in ranges:
                for w, stored, raw in _window_scan(it, lo.encode("utf-8"), hi.encode("utf-8") + b"\x00", 0, 10_000):
                    ((stored[8:].decode("utf-8"), w), int.from_bytes(raw, "big", signed=True))
                    n += 1
            return n

        assert typed_fetch_range() == floor_fetch_range() == 10 * len(ranges) * len(starts)
        self.compare(
            "window fetch_range (10 keys, all windows)", 10 * len(ranges) * len(starts), typed_fetch_range, floor_fetch_range
        )
        for v in (h.get("s"), h.get("f")):
            v.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-typed-")
    bench = TypedBench(args.records, workdir)
    try:
        bench.kv()
        bench.window()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"records per workload: {args.records:,}; ratio = floor ops/s / typed ops/s")
    print_table(["operation", "typed ops/s", "floor ops/s", "ratio"], bench.rows)
    worst = max(bench.rows, key=lambda r: r[3])
    print(f"worst: {worst[0]}")
    print(f"headline: worst typed/raw rocksdict ratio = {worst[3]:.2f}")


if __name__ == "__main__":
    main()
