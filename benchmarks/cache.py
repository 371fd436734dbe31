"""The record cache (KIP-63) on a skewed update stream, in one run.

A count per key (get, add one, put) over 1M updates whose keys follow a Zipf
distribution over 10k hot keys, committed every 100k updates, on a transactional RocksDB
store: without a cache, and with caches of two sizes. Reports the writes that reach the
store, the records forwarded downstream (without a cache every update is forwarded), and
updates per second.

    python benchmarks/cache.py [--updates N] [--keys K] [--zipf S]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table  # noqa: E402

from spark_statestore import Stores, ThreadCache  # noqa: E402

COMMIT_EVERY = 100_000


def zipf_keys(updates: int, keys: int, s: float, seed: int = 3) -> list[bytes]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1) ** s
    ranks = rng.choice(keys, size=updates, p=weights / weights.sum())
    names = [b"user-%06d" % i for i in range(keys)]
    return [names[r] for r in ranks]


def run(path: str, stream: list[bytes], cache_bytes: int | None) -> dict[str, float]:
    inner = Stores.persistent_key_value_store("counts", path)
    writes = [0]
    inner_put, inner_put_all = inner.put, inner.put_all

    def counting_put(key, value):
        writes[0] += 1
        inner_put(key, value)

    def counting_put_all(pairs):
        pairs = list(pairs)
        writes[0] += len(pairs)
        inner_put_all(pairs)

    inner.put, inner.put_all = counting_put, counting_put_all  # count what reaches the store (a flush writes by put_all)
    forwarded = [0]
    if cache_bytes is None:
        store = inner
    else:
        store = Stores.caching(inner, ThreadCache(cache_bytes), on_flush=lambda changes: forwarded.__setitem__(0, forwarded[0] + len(changes)))
    get, put = store.get, store.put
    started = time.perf_counter()
    for i, key in enumerate(stream):
        count = get(key)
        put(key, (int.from_bytes(count, "big") + 1 if count else 1).to_bytes(8, "big"))
        if cache_bytes is None:
            forwarded[0] += 1  # without a cache every update goes downstream
        if i % COMMIT_EVERY == COMMIT_EVERY - 1:
            store.commit({"updates": i + 1})
    store.commit({"updates": len(stream)})
    seconds = time.perf_counter() - started
    total = sum(int.from_bytes(v, "big") for _, v in store.all())
    store.close()
    assert total == len(stream)
    return {"writes": writes[0], "forwarded": forwarded[0], "rate": len(stream) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--zipf", type=float, default=1.1)
    args = parser.parse_args()
    stream = zipf_keys(args.updates, args.keys, args.zipf)
    workdir = tempfile.mkdtemp(prefix="bench-cache-")
    runs = [("no cache", None), ("cache 10 MiB", 10 << 20), ("cache 256 KiB", 256 << 10)]
    results = {}
    try:
        for i, (label, size) in enumerate(runs):
            results[label] = run(os.path.join(workdir, str(i)), stream, size)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    base = results["no cache"]
    rows = [
        [label, r["writes"], r["forwarded"], base["writes"] / r["writes"], r["rate"], r["rate"] / base["rate"]]
        for label, r in results.items()
    ]
    print(f"{args.updates:,} updates, Zipf(s={args.zipf}) over {args.keys:,} keys, commit every {COMMIT_EVERY:,}")
    print_table(
        ["run", "store writes", "forwarded", "writes reduction", "updates/s", "throughput vs no cache"], rows
    )
    print(f"headline: store writes without/with cache = {base['writes'] / results['cache 10 MiB']['writes']:.1f}")


if __name__ == "__main__":
    main()
