"""A deterministic transactional workload for kill and fault tests.

Run as a script, it opens a database with a key-value and a window store and commits
transactions `last committed + 1, + 2, ...` (offset `txn` = transaction number), printing
`writing N` before transaction N's writes, `written N` after them, `committed N` after
its commit returns (and `flushed N` after each flush). Transaction N is a function of
(seed, N) alone, so `expected(seed, n)` rebuilds the state after n commits with the
in-memory stores, which is what a reopened database must hold. With `--bulk`, each
transaction is one large `put_all` instead (`bulk_pairs`: its keyspace's `put_many`).

    python tests/support/txn_workload.py PATH --seed S [--no-wal] [--limit BYTES] [--flush-every K] [--bulk]
"""

from __future__ import annotations

import argparse
import threading
import random

from spark_statestore import Stores
from spark_statestore.txn import TransactionalDatabase
from spark_statestore.txn.keyspace import _BULK_CHUNK

RETENTION = 200
SIZE = 10
SEGMENT = 50
# --bulk: with this limit, the second of a transaction's three put_many chunks spills it (a
# chunk costs 1.26 to 1.88 MiB with ENTRY_COST, two at least 2.52), in two or more write
# batches (8192 records of 156 bytes or more: past the 1 MiB of a spill batch); its commit
# spills the third. So a transaction spills twice.
BULK_LIMIT = 2 << 20


def transaction_ops(seed: int, number: int) -> list[tuple]:
    rng = random.Random(seed * 1_000_003 + number)
    ops: list[tuple] = []
    for _ in range(rng.randint(1, 120)):
        r = rng.random()
        key = b"k%03d" % rng.randrange(200)
        if r < 0.55:
            ops.append(("kv", key, rng.randbytes(rng.randint(1, 24))))
        elif r < 0.7:
            ops.append(("kv", key, None))
        else:
            start = max(0, number * 7 + rng.randint(-40, 5))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(1, 16))
            ops.append(("win", key, value, start))
    return ops


def bulk_pairs(seed: int, number: int) -> list[tuple[bytes, bytes]]:
    """Transaction `number` of a --bulk run: puts of three `put_many` chunks of distinct keys
    (of 20000), values of 150 to 300 bytes."""
    rng = random.Random(seed * 1_000_003 + number)
    keys = rng.sample(range(20_000), rng.randint(2 * _BULK_CHUNK + 1, 3 * _BULK_CHUNK))
    return [(b"b%05d" % key, rng.randbytes(rng.randint(150, 300))) for key in keys]


def write_transaction(seed: int, number: int, bulk: bool, kv, win) -> None:
    """The writes of transaction `number` (`bulk`: one `put_all`, see `bulk_pairs`)."""
    if bulk:
        kv.put_all(bulk_pairs(seed, number))
    else:
        apply_ops(transaction_ops(seed, number), kv, win)


def apply_ops(ops: list[tuple], kv, win) -> None:
    for op in ops:
        if op[0] == "kv":
            kv.put(op[1], op[2])
        else:
            win.put(op[1], op[2], op[3])


def state_of(kv, win) -> tuple:
    windows = [(w.key, w.window.start, v) for w, v in win.all()]
    return list(kv.all()), windows, win.observed_stream_time


def expected(seed: int, commits: int, bulk: bool = False) -> tuple:
    kv = Stores.in_memory_key_value_store("kv")
    win = Stores.in_memory_window_store("win", RETENTION, SIZE)
    for number in range(1, commits + 1):
        write_transaction(seed, number, bulk, kv, win)
    return state_of(kv, win)


def open_database(path: str, wal: bool = True, limit: int = -1) -> tuple:
    db = TransactionalDatabase(path, wal=wal, uncommitted_max_bytes=limit, commit_chunk_bytes=512)
    kv = db.key_value_store("kv")
    win = db.window_store("win", RETENTION, SIZE, False, SEGMENT)
    return db, kv, win


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--no-wal", action="store_true")
    parser.add_argument("--limit", type=int, default=-1)
    parser.add_argument("--flush-every", type=int, default=0)
    parser.add_argument("--max", type=int, default=10**9)
    parser.add_argument("--hold", action="store_true", help="after --max commits, wait to be killed")
    parser.add_argument("--bulk", action="store_true", help="each transaction is one large put_all")
    args = parser.parse_args()
    db, kv, win = open_database(args.path, not args.no_wal, args.limit)
    number = (db.committed_offset("txn") or 0) + 1
    print(f"opened {number - 1}", flush=True)
    while number <= args.max:
        print(f"writing {number}", flush=True)
        write_transaction(args.seed, number, args.bulk, kv, win)
        print(f"written {number}", flush=True)
        db.commit({"txn": number})
        print(f"committed {number}", flush=True)
        if args.flush_every and number % args.flush_every == 0:
            db.flush()
            print(f"flushed {number}", flush=True)
        number += 1
    if args.hold:
        print("holding", flush=True)
        threading.Event().wait()
    db.close()


if __name__ == "__main__":
    main()
