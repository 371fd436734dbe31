"""Transactional stores (KIP-892) against plain rocksdict writes, in one run.

1. Write throughput of transactions of 1k, 10k and 100k writes per commit, WAL on and off,
   against plain `rocksdict` puts (WAL on, no transaction) of the same records.
2. Commit latency of a 10k-write transaction with 1M and 10M keys already committed
   (it must not grow with the size of the store).
3. Peak memory (RSS) of one transaction writing 10x and 20x `uncommitted_max_bytes`,
   against the 10x transaction with no limit, each in a fresh subprocess.
4. Transactions of 1k writes that spill (a 16 KiB limit) against the same ones held in
   memory: commit and rollback time, the staging column family made and dropped in each.

    python benchmarks/transactions.py [--writes N] [--big-keys N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import rocksdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import best_time, print_table  # noqa: E402

from spark_statestore.txn import TransactionalDatabase  # noqa: E402

VALUE = b"x" * 48


def records(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(count)]


def plain_rocksdict(path: str, keys: list[bytes]) -> None:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(path, opts)
    put = db.put
    for key in keys:
        put(key, VALUE)
    db.close()


def transactional(path: str, keys: list[bytes], per_commit: int, wal: bool) -> None:
    db = TransactionalDatabase(path, wal=wal, uncommitted_max_bytes=-1)
    store = db.key_value_store("s")
    put = store.put
    for start in range(0, len(keys), per_commit):
        for key in keys[start : start + per_commit]:
            put(key, VALUE)
        db.commit({"n": start})
    db.close()


def throughput(workdir: str, writes: int) -> tuple[list[list[object]], float]:
    keys = records(writes)
    counter = [0]

    def fresh_path() -> str:
        counter[0] += 1
        path = os.path.join(workdir, f"t{counter[0]}")
        shutil.rmtree(path, ignore_errors=True)
        return path

    rows = []
    plain = best_time(lambda: plain_rocksdict(fresh_path(), keys))
    headline = 0.0
    for per_commit in (1_000, 10_000, 100_000):
        for wal in (True, False):
            t = best_time(lambda n=per_commit, w=wal: transactional(fresh_path(), keys, n, w))
            ratio = plain / t
            rows.append(
                [f"{per_commit:,}", "on" if wal else "off", writes / t, writes / plain, ratio]
            )
            if per_commit == 10_000 and wal:
                headline = ratio
    return rows, headline


def commit_latency(workdir: str, sizes: list[int]) -> list[list[object]]:
    rows = []
    for size in sizes:
        path = os.path.join(workdir, f"big{size}")
        db = TransactionalDatabase(path, wal=False, uncommitted_max_bytes=-1)
        store = db.key_value_store("s")
        rng = random.Random(size)
        loaded = 0
        load_start = time.perf_counter()
        while loaded < size:
            batch = min(200_000, size - loaded)
            for i in range(loaded, loaded + batch):
                store.put(i.to_bytes(8, "big") + b"-key", VALUE)
            db.commit()
            loaded += batch
        load_seconds = time.perf_counter() - load_start
        db.close()
        # measure on a WAL-on reopen: the default mode
        db = TransactionalDatabase(path, uncommitted_max_bytes=-1)
        store = db.key_value_store("s")
        latencies = []
        for _ in range(20):
            for _ in range(10_000):
                store.put(rng.randrange(size).to_bytes(8, "big") + b"-key", VALUE)
            started = time.perf_counter()
            db.commit({"n": 1})
            latencies.append(time.perf_counter() - started)
        db.close()
        shutil.rmtree(path, ignore_errors=True)
        latencies.sort()
        rows.append([f"{size:,}", latencies[len(latencies) // 2] * 1000, latencies[-1] * 1000, load_seconds])
    return rows


def spilled_ends(workdir: str, transactions: int = 30, writes: int = 1_000) -> list[list[object]]:
    """Median ms of writing, then committing or rolling back, `writes` records, with the
    transaction spilled to its staging column family or held in memory (WAL off, as the
    partition state runs it)."""
    keys = records(transactions * writes, seed=7)
    rows = []
    for label, limit in (("spilled (16 KiB limit)", 16 << 10), ("in memory (no limit)", -1)):
        db = TransactionalDatabase(os.path.join(workdir, f"ends{limit}"), wal=False, uncommitted_max_bytes=limit)
        store = db.key_value_store("s")
        times: dict[str, list[float]] = {"commit": [], "rollback": []}
        for n in range(transactions):
            for key in keys[n * writes : (n + 1) * writes]:
                store.put(key, VALUE)
            end = "commit" if n % 2 == 0 else "rollback"
            started = time.perf_counter()
            getattr(db, end)()
            times[end].append(time.perf_counter() - started)
        rows.append([label, *(sorted(t)[len(t) // 2] * 1000 for t in times.values()), db.metrics.spills])
        db.close()
    return rows


def _current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memory_child(path: str, limit: int, total_bytes: int) -> None:
    """Run in a subprocess: one transaction of `total_bytes`, report RSS growth over the
    RSS right after opening (the peak is the kernel's high-water mark)."""
    db = TransactionalDatabase(path, uncommitted_max_bytes=limit, write_buffer_bytes=4 << 20)
    store = db.key_value_store("s")
    base = _current_rss()
    written = 0
    i = 0
    while written < total_bytes:
        key = i.to_bytes(8, "big")
        value = key * 25  # a distinct 200-byte value per record, as real data has
        store.put(key, value)
        written += len(key) + len(value)
        i += 1
    peak_writing = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    db.commit()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert store.get(key) == value
    db.close()
    print(
        json.dumps(
            {"base": base, "peak_writing": peak_writing, "peak": peak, "spills": db.metrics.spills}
        )
    )


def peak_memory(workdir: str, limit: int) -> list[list[object]]:
    """Peak RSS growth of one transaction of 10x and 20x the limit, and of 10x unbounded."""
    rows = []
    for label, lim, factor in (("limit", limit, 10), ("limit", limit, 20), ("no limit (-1)", -1, 10)):
        path = os.path.join(workdir, f"mem{lim}-{factor}")
        total = factor * limit
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", path, str(lim), str(total)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append(
            [
                label,
                total / 2**20,
                limit / 2**20 if lim > 0 else "-",
                (r["peak_writing"] - r["base"]) / 2**20,
                (r["peak"] - r["base"]) / 2**20,
                r["spills"],
            ]
        )
        shutil.rmtree(path, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=300_000)
    parser.add_argument("--big-keys", type=int, default=10_000_000)
    parser.add_argument("--limit-mb", type=int, default=16)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        path, limit, total = args.memory_child
        _memory_child(path, int(limit), int(total))
        return
    workdir = tempfile.mkdtemp(prefix="bench-txn-")
    try:
        rows, headline = throughput(workdir, args.writes)
        print(f"1. write throughput, {args.writes:,} writes of 16-byte keys and 48-byte values")
        print_table(["writes/commit", "WAL", "txn writes/s", "plain rocksdict writes/s", "txn/plain"], rows)
        sizes = sorted({min(1_000_000, args.big_keys), args.big_keys})
        latency = commit_latency(workdir, sizes)
        print("\n2. commit latency of a 10k-write transaction (WAL on), by committed keys")
        print_table(["committed keys", "median ms", "max ms", "load s"], latency)
        if len(latency) == 2:
            print(f"latency ratio {sizes[-1]:,}/{sizes[0]:,} keys = {latency[1][1] / latency[0][1]:.2f}")
        mem = peak_memory(workdir, args.limit_mb << 20)
        print("\n3. peak RSS growth of one transaction writing 10x / 20x the limit (RocksDB write buffers 4 MiB)")
        print_table(
            ["run", "written MiB", "limit MiB", "peak growth writing MiB", "peak growth incl. commit MiB", "spills"],
            mem,
        )
        ends = spilled_ends(workdir)
        print("\n4. ending a transaction of 1k writes (WAL off), spilled or held in memory")
        print_table(["transaction", "commit median ms", "rollback median ms", "spills"], ends)
        print(f"commit ms spilled/in memory = {ends[0][1] / ends[1][1]:.2f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"headline: transactional/plain write throughput = {headline:.2f}")


if __name__ == "__main__":
    main()
