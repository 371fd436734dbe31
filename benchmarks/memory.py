"""Memory of a worker against its configured budget, in one run.

A Python worker's state memory is bounded by three settings: its share of the record cache
(`spark.statestore.cache.maxBytes` / task slots), the uncommitted limit of its task
(`spark.statestore.uncommitted.maxBytes`) and its share of RocksDB's memory
(`spark.statestore.rocksdb.memoryBytes` / task slots: memtables and block cache). Each
scenario runs in a fresh subprocess and reports the growth of its peak RSS (the kernel's
high-water mark, reset before the scenario starts) over its RSS right before, divided by
the budget the scenario configured:

1. record cache: a cache filled far past its budget with small entries (8-byte keys and
   values: the Python overhead per entry dominates) and with 100-byte values;
2. one transaction writing 10x and 40x its uncommitted limit, committed;
3. a partition of the Spark-free partition state processing one large batch through the
   record cache, the transaction buffer and RocksDB: all three budgets at once.

    python benchmarks/memory.py [--scale F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

MIB = 1 << 20


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> int:
    """Reset the RSS high-water mark; returns the RSS now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def child_cache(budget: int, value_bytes: int) -> dict:
    from spark_statestore import ThreadCache

    cache = ThreadCache(budget)
    named = cache.named_cache("store")
    named.listener = lambda entries: None  # flushed entries go nowhere: only the cache is measured
    pad = b"v" * (value_bytes - 8)
    base = _reset_peak()
    for i in range(3 * budget // (16 + value_bytes)):
        named.put(b"%08d" % i, b"%08d" % i + pad, True)  # a value object of its own, as real records have
    return {"growth": _status("VmHWM") - base, "budget": budget, "entries": len(named)}


def child_transaction(limit: int, rocks: int, total: int, path: str) -> dict:
    from spark_statestore.stores.rocksdb import RocksMemory
    from spark_statestore.txn import TransactionalDatabase

    db = TransactionalDatabase(path, uncommitted_max_bytes=limit, rocks_memory=RocksMemory(rocks))
    kv = db.key_value_store("kv")
    pad = b"v" * 88
    base = _reset_peak()
    for i in range(total // (16 + 100)):
        kv.put(b"key-%012d" % i, b"%012d" % i + pad)  # a distinct 100-byte value object per record
    db.commit({"txn": 1})
    growth = _status("VmHWM") - base
    db.close()
    return {"growth": growth, "budget": limit + rocks, "spills": db.metrics.spills}


def child_partition(cache_bytes: int, limit: int, rocks: int, rows: int, path: str) -> dict:
    from spark_statestore import ThreadCache
    from spark_statestore.partition import PartitionOptions, PartitionState, StoreSpec, WorkerResources
    from spark_statestore.stores.rocksdb import RocksMemory

    state = PartitionState(
        os.path.join(path, "checkpoint"),
        0,
        [StoreSpec.key_value("counts"), StoreSpec.window("windows", 600_000, 60_000)],
        WorkerResources(os.path.join(path, "local"), cache=ThreadCache(cache_bytes), rocks_memory=RocksMemory(rocks)),
        PartitionOptions(uncommitted_max_bytes=limit),
    )
    base = _reset_peak()
    for batch in range(2):
        state.open(batch)
        counts, windows = state.store("counts"), state.store("windows")
        for i in range(rows):
            key = b"user-%09d" % (i * 7919 % rows)
            counts.put(key, b"%d" % (batch * rows + i))
            windows.put(key, b"1", (i % 30) * 60_000)
        state.prepare()
        state.close()
    state.wait_for_snapshots()
    return {"growth": _status("VmHWM") - base, "budget": cache_bytes + limit + rocks}


def _run_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every size")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *params = args.child
        numbers = [int(p) if p.isdigit() else p for p in params]
        result = {"cache": child_cache, "transaction": child_transaction, "partition": child_partition}[kind](*numbers)
        print(json.dumps(result))
        return
    s = args.scale
    work = tempfile.mkdtemp(prefix="memory-bench-")
    rows = []
    try:
        for value_bytes in (8, 100):
            budget = int(32 * MIB * s)
            r = _run_child("cache", str(budget), str(value_bytes))
            rows.append([f"record cache, {value_bytes}-byte values", r["budget"] / MIB, r["growth"] / MIB, r["growth"] / r["budget"]])
        for factor in (10, 40):
            limit, rocks = int(16 * MIB * s), int(32 * MIB * s)
            path = os.path.join(work, f"txn-{factor}")
            r = _run_child("transaction", str(limit), str(rocks), str(factor * limit), path)
            label = f"transaction of {factor}x the uncommitted limit ({r['spills']} spills)"
            rows.append([label, r["budget"] / MIB, r["growth"] / MIB, r["growth"] / r["budget"]])
        cache_bytes, limit, rocks = int(8 * MIB * s), int(16 * MIB * s), int(32 * MIB * s)
        r = _run_child("partition", str(cache_bytes), str(limit), str(rocks), str(int(600_000 * s)), os.path.join(work, "p"))
        rows.append(["partition state, 2 batches of 600k updates", r["budget"] / MIB, r["growth"] / MIB, r["growth"] / r["budget"]])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(["scenario", "budget MiB", "peak RSS growth MiB", "growth / budget"], rows)
    print(f"headline: worst peak RSS growth / configured budget = {max(r[3] for r in rows):.2f}")


if __name__ == "__main__":
    main()
