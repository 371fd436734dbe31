"""Store demo: counting events per key in tumbling windows with a persistent window store.

Runs without Spark. It generates a stream of (key, event time) pairs with some late
events, counts them per key and 10-second window in a RocksDB window store, emits each
window's counts once the window can no longer change, and shows that state survives a
reopen of the store. An in-memory TTL store keeps the sensors seen in the last second of
event time (its entries expire on the stream time), and an in-memory session store each
sensor's sessions of activity (events at most 500 ms apart), merged as events arrive.

    ./dev example [--events N] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from datetime import timedelta

from spark_statestore import Serdes, Stores
from spark_statestore.stores.session_merge import merge_record

WINDOW_MS = 10_000
GRACE_MS = 5_000
SESSION_GAP_MS = 500


def generate(events: int, seed: int = 42):
    """(key, event_time_ms) in roughly increasing time, 5% of them up to 20 s late."""
    rng = random.Random(seed)
    now = 0
    for _ in range(events):
        now += rng.randint(0, 200)
        late = rng.randint(0, 20_000) if rng.random() < 0.05 else 0
        yield f"sensor-{rng.randint(1, 5)}", max(0, now - late)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000)
    parser.add_argument("--state-dir", default=None, help="where the RocksDB store lives (default: a temp dir)")
    args = parser.parse_args()
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="store-demo-")

    def open_store():
        # retention covers the grace period plus one more window, so that a window is still
        # readable for a while after it closes (when it is emitted)
        store = Stores.persistent_window_store(
            "counts", f"{state_dir}/counts", retention_period=2 * WINDOW_MS + GRACE_MS, window_size=WINDOW_MS
        )
        return store, store.typed(Serdes.string(), Serdes.int64())

    raw, counts = open_store()
    active = Stores.in_memory_key_value_store("active", ttl=timedelta(seconds=1), ttl_clock="event_time")
    last_seen = active.typed(Serdes.string(), Serdes.int64())
    # a session store: sessions of activity per sensor, kept for a minute of event time
    sessions = Stores.in_memory_session_store("activity", timedelta(minutes=1)).typed(Serdes.string(), Serdes.int64())
    emitted_up_to = 0
    for i, (key, ts) in enumerate(generate(args.events)):
        start = ts - ts % WINDOW_MS
        counts.put(key, (counts.get(key, start) or 0) + 1, start)
        last_seen.advance_time(raw.observed_stream_time)  # TTL: entries older than 1 s expire
        last_seen.put(key, ts)
        merge_record(sessions, key, ts, 1, SESSION_GAP_MS, lambda a, b: a + b)  # events per session
        if i % 100 == 99:
            raw.commit({"events": i + 1})  # writes become durable at commit (KIP-892)
        if i == args.events // 2:  # reopen half way: committed state is on disk
            raw.commit({"events": i + 1})
            raw.close()
            raw, counts = open_store()
        # windows that ended more than GRACE_MS before stream time are final
        closed_before = raw.observed_stream_time - GRACE_MS - WINDOW_MS
        if closed_before >= emitted_up_to:
            for windowed, count in counts.fetch_all(emitted_up_to, closed_before):
                print(f"window [{windowed.window.start:>7}, {windowed.window.end:>7}) {windowed.key}: {count}")
            emitted_up_to = closed_before + 1
    raw.commit({"events": args.events})
    longest = max(sessions.all(), key=lambda item: item[0].end - item[0].start)
    print(f"activity sessions in the last minute: {len(list(sessions.all()))}; the longest: {longest}")
    print(f"sensors seen in the last second of event time (a TTL store): {dict(last_seen.all())}")
    print(f"late events dropped: {raw.metrics.dropped_records_total}; committed events: "
          f"{raw.committed_offset('events')}; state in {state_dir}")
    raw.close()


if __name__ == "__main__":
    main()
