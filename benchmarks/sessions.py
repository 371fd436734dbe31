"""Session windows: spark_statestore's session store against the hand-written merge a user
writes over a key-value store (and Quix Streams' session windows where the installed
quixstreams has them at the store level; `peers.py` runs this workload too).

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

    python benchmarks/sessions.py [--events N] [--keys K] [--repeats R]
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
from spark_statestore.stores.session_merge import close_sessions, merge_record

PER_COMMIT = 10_000
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
    one = (1).to_bytes(8, "big")
    emitted: dict = {}
    watermark, latest = 0, 0
    start = time.perf_counter()
    for i, (key, t) in enumerate(events, 1):
        if t + gap > watermark:  # else late: it can join no session
            merge_record(store, key, t, one, gap, _count)
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
            sessions = [] if raw is None else list(_SESSION.iter_unpack(raw))
            lo, hi, count, keep = t, t, 1, []
            for s, e, c in sessions:
                if e >= t - gap and s <= t + gap:
                    lo, hi, count = min(lo, s), max(hi, e), count + c
                else:
                    keep.append((s, e, c))
            keep.append((lo, hi, count))
            keep.sort(key=lambda session: (session[1], session[0]))
            put(key, b"".join(_SESSION.pack(*s) for s in keep))
        latest = max(latest, t)
        if i % PER_COMMIT == 0:
            watermark = max(watermark, latest - 2 * gap)
            changed = []
            for key, raw in store.all():  # no order by end: every key is looked at
                sessions = list(_SESSION.iter_unpack(raw))
                open_ = [s for s in sessions if s[1] + gap > watermark]
                if len(open_) != len(sessions):
                    for s, e, c in sessions:
                        if e + gap <= watermark:
                            emitted[(key, s, e)] = c
                    changed.append((key, b"".join(_SESSION.pack(*s) for s in open_) or None))
            for key, value in changed:
                put(key, value)
            store.commit({"input-0": i})
    store.commit({"input-0": len(events)})
    elapsed = time.perf_counter() - start
    for key, raw in store.all():
        for s, e, c in _SESSION.iter_unpack(raw):
            emitted[(key, s, e)] = c
    store.close()
    return elapsed, emitted


def quix_has_session_windows() -> bool:
    """Whether the installed quixstreams (if any) has session windows."""
    try:
        import quixstreams.dataframe.windows as windows
    except ImportError:
        return False
    return any("session" in name.lower() for name in dir(windows))


def compare(events: list[tuple[bytes, int]], gap: int, repeats: int, workdir: str) -> tuple[float, float]:
    """Best-of-`repeats` events per second: (session store, hand-written); exits 1 when
    the two emit different sessions."""
    best = [float("inf"), float("inf")]
    for r in range(repeats):
        gc.collect()
        o, ours = ours_sessions(os.path.join(workdir, f"o{r}"), events, gap)
        gc.collect()
        k, theirs = kv_sessions(os.path.join(workdir, f"k{r}"), events, gap)
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
    args = parser.parse_args()
    events = session_events(args.events, args.keys, args.step_ms)
    workdir = tempfile.mkdtemp(prefix="bench-sessions-")
    try:
        ours, kv = compare(events, args.gap_ms, args.repeats, workdir)
        print_table(
            ["workload", "session store events/s", "hand-written merge events/s", "ratio"],
            [[f"sessions, gap {args.gap_ms} ms, {args.keys:,} keys, commit every 10k", ours, kv, ours / kv]],
        )
        if not quix_has_session_windows():
            print("quixstreams: not installed, or without session windows: no Quix comparison")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
