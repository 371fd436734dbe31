"""Session windows: spark_statestore's session store against the hand-written merge a user
writes over a key-value store, and against Quix Streams' own session windows (`peers.py`
runs this workload too).

Workload: events `(key, time)` over `--keys` keys, event time rising by `--step-ms` per
event with jitter and ~2% late events; per event, the key's sessions within `--gap-ms`
are merged with it (a count per session); every 10k events the watermark (the largest
time minus 2 gaps) closes sessions, which are emitted once and removed, and the
transaction commits. Both sides run on transactional RocksDB (one write batch per
commit) and must emit the same sessions, or the script exits 1.

The hand-written side keeps, per key, the list of its open sessions as one value
(`start, end, count` as 24 bytes each): one get and one put per event, and at each close
a scan of every key for sessions the watermark closed (a key-value store has no order by
session end). The session store finds closed sessions through its order by end.

How far 2x is: the time the hand-written side spends in its get and put alone is measured
too (`kv_io`), against half its whole time, what 2x leaves a session store.

Both are also run a 10k micro-batch at a time (what Spark hands a partition): the session
store with `merge_batch` (one read per touched key, net changes written), the hand-written
side with one `get_all` of the batch's keys and one `put_all` of the changed values.

Quix (3.28.1) runs its session window's per-record processing on a Quix RocksDB windowed
partition, committing every 10k events, with "partition" closing (the only one that closes
what we close); that close looks at every key each time a session is due, so Quix gets
the first `--quix-events` events (10,000 by default), and the session store the same ones.

    python benchmarks/sessions.py [--events N] [--keys K] [--repeats R] [--quix-events N]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table

from spark_statestore import Stores
from spark_statestore.stores.session_batch import merge_batch
from spark_statestore.stores.session_merge import close_sessions, merge_record

PER_COMMIT = 10_000
QUIX_EVENTS = 10_000  # Quix's partition-wide close makes 20k events at 20k keys take minutes
MAX_TIME = 2**63 - 1
ONE = (1).to_bytes(8, "big")  # each event's count
_SESSION = struct.Struct(">qqq")


def session_events(count: int, keys: int, step_ms: int, seed: int = 9) -> list[tuple[bytes, int]]:
    """`count` events over `keys` keys, time rising by `step_ms` each, jittered; ~2% late."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        t = i * step_ms + rng.randrange(step_ms * 20)
        if rng.random() < 0.02:
            t = max(0, t - rng.randrange(step_ms * 2000))
        out.append((b"user-%05d" % rng.randrange(keys), t))
    return out


def _count(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") + int.from_bytes(b, "big")).to_bytes(8, "big")


def ours_sessions(path: str, events: list[tuple[bytes, int]], gap: int) -> tuple[float, dict]:
    """The session store with `merge_record` and `close_sessions`."""
    store = Stores.persistent_session_store("sessions", path, 4 * gap, clock="external")
    emitted: dict = {}
    watermark, latest = 0, 0
    start = time.perf_counter()
    for i, (key, t) in enumerate(events, 1):
        if t + gap > watermark:  # else late: it can join no session
            merge_record(store, key, t, ONE, gap, _count)
        latest = max(latest, t)
        if i % PER_COMMIT == 0:
            watermark = max(watermark, latest - 2 * gap)
            for window, value in close_sessions(store, watermark, gap):
                emitted[tuple(window)] = int.from_bytes(value, "big")
            store.advance_stream_time(watermark)
            store.commit({"input-0": i})
    store.commit({"input-0": len(events)})
    elapsed = time.perf_counter() - start
    for window, value in store.all():
        emitted[tuple(window)] = int.from_bytes(value, "big")
    store.close()
    return elapsed, emitted


def merge_event(sessions: list, t: int, gap: int) -> list:
    """A key's `(start, end, count)` sessions with an event at `t` merged in (unsorted)."""
    lo, hi, count, keep = t, t, 1, []
    for s, e, c in sessions:
        if e >= t - gap and s <= t + gap:
            lo, hi, count = min(lo, s), max(hi, e), count + c
        else:
            keep.append((s, e, c))
    keep.append((lo, hi, count))
    return keep


def _close_kv(store, watermark: int, gap: int, emitted: dict) -> list[tuple[bytes, bytes | None]]:
    """Emit the sessions `watermark` closed; the keys' new values (None: no session left).
    A key-value store has no order by session end: every key is looked at."""
    changed = []
    for key, raw in store.all():
        sessions = list(_SESSION.iter_unpack(raw))
        open_ = [s for s in sessions if s[1] + gap > watermark]
        if len(open_) != len(sessions):
            for s, e, c in sessions:
                if e + gap <= watermark:
                    emitted[(key, s, e)] = c
            changed.append((key, b"".join(_SESSION.pack(*s) for s in open_) or None))
    return changed


def kv_sessions(path: str, events: list[tuple[bytes, int]], gap: int) -> tuple[float, dict]:
    """The hand-written merge: per key, its open sessions as one value."""
    store = Stores.persistent_key_value_store("sessions", path)
    get, put = store.get, store.put
    emitted: dict = {}
    watermark, latest = 0, 0
    start = time.perf_counter()
    for i, (key, t) in enumerate(events, 1):
        if t + gap > watermark:
            raw = get(key)
            keep = merge_event([] if raw is None else list(_SESSION.iter_unpack(raw)), t, gap)
            keep.sort(key=lambda session: (session[1], session[0]))
            put(key, b"".join(_SESSION.pack(*s) for s in keep))
        latest = max(latest, t)
        if i % PER_COMMIT == 0:
            watermark = max(watermark, latest - 2 * gap)
            store.put_all(_close_kv(store, watermark, gap, emitted))
            store.commit({"input-0": i})
    store.commit({"input-0": len(events)})
    elapsed = time.perf_counter() - start
    _close_kv(store, MAX_TIME, 0, emitted)  # what is still open
    store.close()
    return elapsed, emitted


def kv_io(path: str, events: list[tuple[bytes, int]], gap: int) -> float:
    """The hand-written merge's reads and writes alone: per event its one get and one put
    (a value of one session), committed as often; no merge, no close. Seconds."""
    store = Stores.persistent_key_value_store("sessions", path)
    get, put = store.get, store.put
    one = _SESSION.pack(0, 0, 1)
    start = time.perf_counter()
    for i, (key, t) in enumerate(events, 1):
        raw = get(key)
        put(key, one if raw is None else raw)
        if i % PER_COMMIT == 0:
            store.commit({"input-0": i})
    store.commit({"input-0": len(events)})
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed


def _batches(events: list[tuple[bytes, int]]) -> list[tuple[int, list[tuple[bytes, int]]]]:
    """The events as micro-batches of `PER_COMMIT` (what Spark hands a partition at a time)."""
    return [(i + PER_COMMIT, events[i : i + PER_COMMIT]) for i in range(0, len(events), PER_COMMIT)]


def ours_batched(path: str, events: list[tuple[bytes, int]], gap: int) -> tuple[float, dict]:
    """The session store with `merge_batch` per micro-batch and `close_sessions`."""
    store = Stores.persistent_session_store("sessions", path, 4 * gap, clock="external")
    emitted: dict = {}
    watermark, latest = 0, 0
    start = time.perf_counter()
    for offset, batch in _batches(events):
        live = [(key, t) for key, t in batch if t + gap > watermark]
        merge_batch(store, [k for k, _ in live], [t for _, t in live], [ONE] * len(live), gap, _count)
        latest = max(latest, max(t for _, t in batch))
        watermark = max(watermark, latest - 2 * gap)
        for window, value in close_sessions(store, watermark, gap):
            emitted[tuple(window)] = int.from_bytes(value, "big")
        store.advance_stream_time(watermark)
        store.commit({"input-0": offset})
    elapsed = time.perf_counter() - start
    for window, value in store.all():
        emitted[tuple(window)] = int.from_bytes(value, "big")
    store.close()
    return elapsed, emitted


def kv_batched(path: str, events: list[tuple[bytes, int]], gap: int) -> tuple[float, dict]:
    """The hand-written merge a micro-batch at a time: one `get_all` of the batch's keys,
    the merges in Python, one `put_all` of the keys changed."""
    store = Stores.persistent_key_value_store("sessions", path)
    emitted: dict = {}
    watermark, latest = 0, 0
    start = time.perf_counter()
    for offset, batch in _batches(events):
        by_key: dict[bytes, list[int]] = {}
        for key, t in batch:
            if t + gap > watermark:
                by_key.setdefault(key, []).append(t)
        changed = []
        for (key, times), raw in zip(by_key.items(), store.get_all(list(by_key))):
            sessions = [] if raw is None else list(_SESSION.iter_unpack(raw))
            for t in times:
                sessions = merge_event(sessions, t, gap)
            sessions.sort(key=lambda session: (session[1], session[0]))
            changed.append((key, b"".join(_SESSION.pack(*s) for s in sessions)))
        store.put_all(changed)
        latest = max(latest, max(t for _, t in batch))
        watermark = max(watermark, latest - 2 * gap)
        store.put_all(_close_kv(store, watermark, gap, emitted))
        store.commit({"input-0": offset})
    elapsed = time.perf_counter() - start
    _close_kv(store, MAX_TIME, 0, emitted)  # what is still open
    store.close()
    return elapsed, emitted


def quix_sessions(path: str, events: list[tuple[bytes, int]], gap: int) -> tuple[float, dict]:
    """Quix Streams' own per-record session processing (`SessionWindow.process_window`,
    a count, closing by partition watermark like ours) on a real windowed RocksDB
    partition transaction, committed every `PER_COMMIT` events; no Kafka, no dataframe
    (the window's constructor only stores it). grace = 2 gaps, our watermark delay.
    Quix's session end is exclusive (last event + 1): emitted as `(key, start, last)`."""
    import warnings

    with warnings.catch_warnings():  # authlib (a quixstreams dependency) warns at import
        warnings.showwarning = lambda *args, **kwargs: None
        from quixstreams.dataframe.windows.aggregations import Count
        from quixstreams.dataframe.windows.session import SessionWindowSingleAggregation
        from quixstreams.dataframe.windows.time_based import ClosingStrategy
        from quixstreams.state.rocksdb import RocksDBOptions
        from quixstreams.state.rocksdb.windowed.partition import WindowedRocksDBStorePartition
    window = SessionWindowSingleAggregation(
        inactivity_gap_ms=gap, grace_ms=2 * gap, name="sessions", dataframe=None,
        aggregators={"value": Count()}, collectors={},
    )
    window._closing_strategy = ClosingStrategy.PARTITION  # what .final("partition") sets
    part = WindowedRocksDBStorePartition(
        path, options=RocksDBOptions(compression_type="snappy", open_max_retries=0)
    )
    tx = part.begin()
    emitted: dict = {}
    process = window.process_window
    start = time.perf_counter()
    for i, (key, t) in enumerate(events, 1):
        for k, result in process(1, key, t, None, tx)[1]:
            emitted[(k, result["start"], result["end"] - 1)] = result["value"]
        if i % PER_COMMIT == 0:
            tx.prepare(processed_offsets={"input-0": i})
            tx.flush(changelog_offset=i)
            tx = part.begin()
    tx.prepare(processed_offsets={"input-0": len(events)})
    tx.flush(changelog_offset=len(events))
    elapsed = time.perf_counter() - start
    tx = part.begin()
    for prefix in tx.iter_prefixes():  # what is still open
        for (s, e), value, _ in tx.as_state(prefix=prefix).iter_windows():
            emitted[(prefix, s, e - 1)] = value
    part.close()
    return elapsed, emitted


def quix_has_session_windows() -> bool:
    """Whether the installed quixstreams (if any) has session windows."""
    import warnings

    try:
        with warnings.catch_warnings():  # authlib (a quixstreams dependency) warns at import
            warnings.showwarning = lambda *args, **kwargs: None
            from quixstreams.dataframe import windows
    except ImportError:
        return False
    return any("session" in name.lower() for name in dir(windows))


def compare(
    events: list[tuple[bytes, int]], gap: int, repeats: int, workdir: str, batched: bool = False
) -> tuple[float, float]:
    """Best-of-`repeats` events per second: (session store, hand-written), per record or a
    micro-batch at a time (`batched`, both sides); exits 1 when the two emit different sessions."""
    ours_run, kv_run = (ours_batched, kv_batched) if batched else (ours_sessions, kv_sessions)
    best = [float("inf"), float("inf")]
    for r in range(repeats):
        gc.collect()
        o, ours = ours_run(os.path.join(workdir, f"o{r}{batched}"), events, gap)
        gc.collect()
        k, theirs = kv_run(os.path.join(workdir, f"k{r}{batched}"), events, gap)
        if ours != theirs:
            sys.exit(
                f"the session store and the hand-written merge emitted different sessions "
                f"({len(ours)} and {len(theirs)})"
            )
        best = [min(best[0], o), min(best[1], k)]
    return len(events) / best[0], len(events) / best[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--gap-ms", type=int, default=5_000)
    parser.add_argument("--step-ms", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quix-events", type=int, default=QUIX_EVENTS,
                        help="the first N events run against Quix (its partition-wide close slows as it runs)")
    args = parser.parse_args()
    events = session_events(args.events, args.keys, args.step_ms)
    workdir = tempfile.mkdtemp(prefix="bench-sessions-")
    try:
        rows = []
        for batched, shape in ((False, "per record"), (True, "a 10k micro-batch at a time")):
            ours, kv = compare(events, args.gap_ms, args.repeats, workdir, batched)
            rows.append([f"sessions, {shape}", ours, kv, ours / kv])
        print_table(["workload", "session store events/s", "hand-written merge events/s", "ratio"], rows)
        gc.collect()
        io = min(kv_io(os.path.join(workdir, f"io{r}"), events, args.gap_ms) for r in range(args.repeats))
        per_event = [1e6 / rows[0][2], 1e6 * io / len(events)]
        print(f"hand-written merge, per record: {per_event[0]:.2f} us an event, of which its one get and one "
              f"put alone take {per_event[1]:.2f} us ({per_event[1] / per_event[0]:.0%}); 2x would leave a "
              f"session store {per_event[0] / 2:.2f} us for a record's read, merge and write")
        quix_ratio = None
        if quix_has_session_windows():
            gc.collect()
            head = events[: args.quix_events]
            ours_elapsed, ours = ours_sessions(os.path.join(workdir, "oq"), head, args.gap_ms)
            quix_elapsed, theirs = quix_sessions(os.path.join(workdir, "q"), head, args.gap_ms)
            if ours != theirs:
                sys.exit(f"the session store and Quix emitted different sessions ({len(ours)} and {len(theirs)})")
            quix_ratio = quix_elapsed / ours_elapsed
            print(f"Quix Streams session windows, per record, first {len(head):,} events: "
                  f"{len(head) / quix_elapsed:,.0f} events/s; session store {len(head) / ours_elapsed:,.0f} events/s "
                  f"(same sessions)")
        else:
            print("quixstreams: not installed, or without session windows: no Quix comparison")
        print(
            f"headline: sessions (gap {args.gap_ms} ms, {args.keys:,} keys, {args.events:,} events): "
            f"session store / hand-written merge = {rows[0][3]:.2f}x per record, "
            f"{rows[1][3]:.2f}x a micro-batch at a time (goal: 2x)"
        )
        if quix_ratio is not None:
            print(f"headline: session store / Quix Streams session windows events per second = {quix_ratio:.2f}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
