"""Store throughput against its floor, side by side in one run.

Floors: a bare `SortedDict` (key-value) and a bare `SortedDict` of `SortedDict`s (window
store) for the in-memory stores; raw `rocksdict` calls on the same key layout for the
RocksDB stores (which are transactional: their put loops commit every 10,000 writes). Floors produce the same information the store returns (for window scans:
key, window start and value per record) and nothing more. The ratio is floor throughput /
store throughput (1.0 = no overhead).

    python benchmarks/stores.py [--records N]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile

import rocksdict
from sortedcontainers import SortedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import best_time, print_table  # noqa: E402

from spark_statestore import Stores  # noqa: E402

VALUE = b"v" * 32
COMMIT_EVERY = 10_000  # persistent stores are transactional: writes commit in batches


def raw_rocksdict(path: str) -> rocksdict.Rdict:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    return rocksdict.Rdict(path, opts)


def _ws(t: int) -> bytes:
    return t.to_bytes(8, "big")


class Bench:
    def __init__(self, records: int, workdir: str) -> None:
        self.n = records
        self.workdir = workdir
        rng = random.Random(7)
        self.keys = [rng.randbytes(16) for _ in range(records)]
        self.lookups = rng.sample(self.keys, min(records, 100_000))
        self.sorted_keys = sorted(self.keys)
        self.range_starts = [rng.randrange(0, records - 100) for _ in range(2000)]
        # window workload: keys x window starts, written in time order
        self.win_keys = [b"key-%05d" % i for i in range(max(records // 100, 1))]
        self.win_starts = [i * 10 for i in range(100)]
        self.rows: list[list[object]] = []
        self.counter = 0

    def path(self) -> str:
        self.counter += 1
        p = os.path.join(self.workdir, f"db{self.counter}")
        shutil.rmtree(p, ignore_errors=True)
        return p

    def record(self, store: str, op: str, count: int, t_store: float, t_floor: float) -> None:
        self.rows.append([store, op, count / t_store, count / t_floor, t_store / t_floor])

    # -- key-value stores ---------------------------------------------------------------

    def kv(self, label: str, make_store, make_floor, floor_ops) -> None:
        keys, lookups = self.keys, self.lookups
        holder: dict = {}

        def fresh():
            for v in holder.values():
                close = getattr(v, "close", None)
                if close:
                    close()
            holder["s"] = make_store()
            holder["f"] = make_floor()

        def store_put():
            store = holder["s"]
            put = store.put
            commit = getattr(store, "commit", None)
            for i, k in enumerate(keys):
                put(k, VALUE)
                if commit is not None and i % COMMIT_EVERY == COMMIT_EVERY - 1:
                    commit()
            if commit is not None:
                commit()

        def floor_put():
            put = floor_ops["put"](holder["f"])
            for k in keys:
                put(k, VALUE)

        fresh()
        t_s = best_time(store_put, setup=fresh)
        t_f = best_time(floor_put, setup=fresh)
        self.record(label, "put", len(keys), t_s, t_f)
        store_put()
        floor_put()

        def store_get():
            get = holder["s"].get
            for k in lookups:
                get(k)

        def floor_get():
            get = floor_ops["get"](holder["f"])
            for k in lookups:
                get(k)

        self.record(label, "get", len(lookups), best_time(store_get), best_time(floor_get))

        chunks = [lookups[i : i + 1000] for i in range(0, len(lookups), 1000)]

        def store_get_all():
            get_all = holder["s"].get_all
            for chunk in chunks:
                get_all(chunk)

        def floor_get_all():
            get_all = floor_ops["get_all"](holder["f"])
            for chunk in chunks:
                get_all(chunk)

        self.record(label, "get_all (1000 keys)", len(lookups), best_time(store_get_all), best_time(floor_get_all))

        sk = self.sorted_keys

        def store_range():
            n = 0
            for i in self.range_starts:
                for _ in holder["s"].range(sk[i], sk[i + 99]):
                    n += 1
            return n

        def floor_range():
            scan = floor_ops["range"]
            n = 0
            for i in self.range_starts:
                for _ in scan(holder["f"], sk[i], sk[i + 99]):
                    n += 1
            return n

        assert store_range() == floor_range() == 100 * len(self.range_starts)
        self.record(
            label, "range (100 rows)", 100 * len(self.range_starts), best_time(store_range), best_time(floor_range)
        )
        for v in holder.values():
            close = getattr(v, "close", None)
            if close:
                close()

    # -- window stores ------------------------------------------------------------------

    def window(self, label: str, make_store, floor) -> None:
        keys, starts = self.win_keys, self.win_starts
        count = len(keys) * len(starts)
        holder: dict = {}

        def fresh(retention=10_000):
            for v in holder.values():
                close = getattr(v, "close", None)
                if close:
                    close()
            holder["s"] = make_store(retention)
            holder["f"] = floor["make"]()

        def store_put():
            store = holder["s"]
            put = store.put
            commit = getattr(store, "commit", None)
            n = 0
            for t in starts:
                for k in keys:
                    put(k, VALUE, t)
                    n += 1
                    if commit is not None and n % COMMIT_EVERY == 0:
                        commit()
            if commit is not None:
                commit()

        def floor_put():
            put = floor["put"]
            f = holder["f"]
            for t in starts:
                for k in keys:
                    put(f, k, VALUE, t)

        fresh()
        self.record(label, "put", count, best_time(store_put, setup=fresh), best_time(floor_put, setup=fresh))
        store_put()
        floor_put()

        lookups = [(k, t) for t in starts[::7] for k in keys]

        def store_get():
            get = holder["s"].get
            for k, t in lookups:
                get(k, t)

        def floor_get():
            get = floor["get"]
            f = holder["f"]
            for k, t in lookups:
                get(f, k, t)

        self.record(label, "get", len(lookups), best_time(store_get), best_time(floor_get))

        fetch_keys = keys[:: max(len(keys) // 500, 1)]

        def store_fetch():
            n = 0
            fetch = holder["s"].fetch
            for k in fetch_keys:
                for _ in fetch(k, 0, 10_000):
                    n += 1
            return n

        def floor_fetch():
            n = 0
            f = holder["f"]
            for k in fetch_keys:
                n += floor["fetch"](f, k, 0, 10_000)
            return n

        assert store_fetch() == floor_fetch() == len(fetch_keys) * len(starts)
        self.record(
            label, "fetch (key, all windows)", len(fetch_keys) * len(starts), best_time(store_fetch), best_time(floor_fetch)
        )

        def store_fetch_all():
            n = 0
            for t in starts[::10]:
                for _ in holder["s"].fetch_all(t, t + 9):
                    n += 1
            return n

        def floor_fetch_all():
            n = 0
            f = holder["f"]
            for t in starts[::10]:
                n += floor["fetch_all"](f, t, t + 9)
            return n

        assert store_fetch_all() == floor_fetch_all() == len(keys) * len(starts[::10])
        self.record(
            label, "fetch_all (one window)", len(keys) * len(starts[::10]), best_time(store_fetch_all), best_time(floor_fetch_all)
        )

        # expiry: retention of 10 windows, so every new window start expires an old one
        def expiring_setup():
            fresh(retention=100)

        self.record(
            label,
            "put with expiry",
            count,
            best_time(store_put, setup=expiring_setup),
            best_time(floor_put, setup=expiring_setup),
        )
        for v in holder.values():
            close = getattr(v, "close", None)
            if close:
                close()


# -- floors ------------------------------------------------------------------------------


def sorted_dict_ops():
    def scan(d, lo, hi):
        for k in d.irange(lo, hi):
            yield k, d[k]

    def get_all(d):
        get = d.get
        return lambda keys: [get(k) for k in keys]

    return {"put": lambda d: d.__setitem__, "get": lambda d: d.get, "get_all": get_all, "range": scan}


def rocksdict_ops():
    def scan(db, lo, hi):
        for k, v in db.items(from_key=lo):
            if k > hi:
                break
            yield k, v

    return {"put": lambda db: db.put, "get": lambda db: db.get, "get_all": lambda db: db.get, "range": scan}


def sorted_window_floor(retention_holder):
    """SortedDict (window start) of SortedDict (key), with expiry of whole segments."""

    class Floor:
        def __init__(self):
            self.segs = SortedDict()
            self.stream = -1
            self.retention = retention_holder["retention"]

    def put(f, key, value, t):
        if t > f.stream:
            f.stream = t
            limit = t - f.retention
            segs = f.segs
            while segs and segs.peekitem(0)[0] <= limit:
                segs.popitem(0)
        seg = f.segs.get(t)
        if seg is None:
            seg = f.segs[t] = SortedDict()
        seg[key] = value

    def get(f, key, t):
        seg = f.segs.get(t)
        return None if seg is None else seg.get(key)

    def fetch(f, key, lo, hi):
        n = 0
        for t in f.segs.irange(lo, hi):
            if f.segs[t].get(key) is not None:
                n += 1
        return n

    def fetch_all(f, lo, hi):
        n = 0
        result = None
        for t in f.segs.irange(lo, hi):
            window = (t, t + 10)
            for key, value in f.segs[t].items():
                result = ((key, window), value)  # the same information the store returns
                n += 1
        del result
        return n

    return {"make": Floor, "put": put, "get": get, "fetch": fetch, "fetch_all": fetch_all}


def rocksdict_window_floor(bench: Bench, retention_holder):
    """Raw rocksdict on the same time-first layout: one put per record, a delete_range
    per expired segment, and one seek per window start for a single-key fetch."""

    class Floor:
        def __init__(self):
            self.db = raw_rocksdict(bench.path())
            self.stream = -1
            self.expired = 0
            self.retention = retention_holder["retention"]

        def close(self):
            self.db.close()

    def put(f, key, value, t):
        if t > f.stream:
            f.stream = t
            boundary = (t - f.retention + 1) // 60_000 * 60_000
            if boundary > f.expired:
                f.db.delete_range(b"", _ws(boundary))
                f.expired = boundary
        f.db.put(_ws(t) + key, value)

    def get(f, key, t):
        return f.db.get(_ws(t) + key)

    def fetch(f, key, lo, hi):
        n = 0
        t = lo
        end = _ws(hi + 1)
        while t <= hi:
            it = f.db.iter()
            it.seek(_ws(t) + key)
            if not it.valid():
                break
            k = it.key()
            if k >= end:
                break
            w = int.from_bytes(k[:8], "big")
            rest = k[8:]
            if rest == key:
                n += 1
                t = w + 1
            elif w > t and rest < key:
                t = w
            else:
                t = w + 1
        return n

    def fetch_all(f, lo, hi):
        opts = rocksdict.ReadOptions()
        opts.set_iterate_upper_bound(_ws(hi + 1))
        n = 0
        result = None
        for k, v in f.db.items(from_key=_ws(lo), read_opt=opts):
            result = ((k[8:], int.from_bytes(k[:8], "big")), v)  # decode what the store returns
            n += 1
        del result
        return n

    return {"make": Floor, "put": put, "get": get, "fetch": fetch, "fetch_all": fetch_all}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-stores-")
    bench = Bench(args.records, workdir)
    try:
        bench.kv("in-memory kv", lambda: Stores.in_memory_key_value_store("kv"), SortedDict, sorted_dict_ops())
        bench.kv(
            "rocksdb kv",
            lambda: Stores.persistent_key_value_store("kv", bench.path()),
            lambda: raw_rocksdict(bench.path()),
            rocksdict_ops(),
        )
        retention = {"retention": 10_000}

        def mem_window(r):
            retention["retention"] = r
            return Stores.in_memory_window_store("w", r, 10)

        def rocks_window(r):
            retention["retention"] = r
            return Stores.persistent_window_store("w", bench.path(), r, 10)

        bench.window("in-memory window", mem_window, sorted_window_floor(retention))
        bench.window("rocksdb window", rocks_window, rocksdict_window_floor(bench, retention))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"records per workload: {args.records:,}; ratio = floor ops/s / store ops/s")
    print_table(["store", "operation", "store ops/s", "floor ops/s", "ratio"], bench.rows)
    worst = max(bench.rows, key=lambda r: r[4])
    print(f"worst: {worst[0]} {worst[1]}")
    print(f"headline: worst store/floor ratio = {worst[4]:.2f}")


if __name__ == "__main__":
    main()
