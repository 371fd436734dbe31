"""A deterministic session-store workload for the kill tests (see txn_workload.py).

Run as a script, it opens a transactional session store and commits transactions `last
committed + 1, + 2, ...` (offset `txn`), each a function of (seed, number) alone: records
merged into their sessions (`merge_record`), some removals, and sessions the clock closed
taken out; it prints `committed N` after each commit. `expected(seed, n)` rebuilds the
state after n commits with the in-memory store. With `--clock watermark` the stream time
is a watermark advanced at each transaction's start, and every other transaction merges
its records as one micro-batch (`merge_batch`): the store's bulk reads and writes.

    python tests/support/session_workload.py PATH --seed S [--limit BYTES] [--max N] [--clock C]
"""

from __future__ import annotations

import argparse
import random

from spark_statestore import Stores, TransactionalDatabase
from spark_statestore.kinds import build_store
from spark_statestore.stores.session_api import SessionSpec
from spark_statestore.stores.session_batch import merge_batch
from spark_statestore.stores.session_merge import close_sessions, merge_record
from spark_statestore.stores.spec import StoreSpec

RETENTION, GAP = 60, 5


def _concat(a: bytes, b: bytes) -> bytes:
    return (a + b)[-16:]


def write_transaction(store, seed: int, number: int) -> None:
    rng = random.Random(seed * 1_000_003 + number)
    watermark = store.clock.value == "watermark"
    if watermark:
        store.advance_stream_time(max(0, number * 4 - 24))
    batch: list[tuple[bytes, int, bytes]] = []
    for _ in range(rng.randint(1, 60)):
        key = b"u%02d" % rng.randrange(30)
        time = max(0, number * 4 + rng.randint(-20, 4))
        if rng.random() < 0.85:
            batch.append((key, time, rng.randbytes(2)))
        else:
            sessions = list(store.fetch(key))
            if sessions:
                store.remove(*rng.choice(sessions)[0])
        if not (watermark and number % 2):
            for record in batch:
                merge_record(store, *record, GAP, _concat)
            batch.clear()
    if batch:
        merge_batch(store, *map(list, zip(*batch)), GAP, _concat)
    close_sessions(store, number * 4 - 30, GAP)


def state_of(store) -> tuple:
    return [(tuple(w), v) for w, v in store.all()], store.observed_stream_time


def expected(seed: int, commits: int, clock: str = "records") -> tuple:
    store = Stores.in_memory_session_store("s", RETENTION, clock=clock)
    for number in range(1, commits + 1):
        write_transaction(store, seed, number)
    return state_of(store)


def open_store(path: str, limit: int = -1, clock: str = "records"):
    """The store in its own database; small commit chunks: a spilled commit applies in several."""
    db = TransactionalDatabase(path, uncommitted_max_bytes=limit, commit_chunk_bytes=512)
    spec = StoreSpec.of("session", "s", SessionSpec.of("s", RETENTION, clock))
    return build_store(spec, db, on_close=db.close)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--limit", type=int, default=-1)
    parser.add_argument("--max", type=int, default=40)
    parser.add_argument("--clock", default="records")
    args = parser.parse_args()
    store = open_store(args.path, args.limit, args.clock)
    number = (store.committed_offset("txn") or 0) + 1
    while number <= args.max:
        write_transaction(store, args.seed, number)
        store.commit({"txn": number})
        print(f"committed {number}", flush=True)
        number += 1
    store.close()


if __name__ == "__main__":
    main()
