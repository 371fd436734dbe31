"""Window stores by columns: `put_columns` does what `put` does record by record, and
`fetch_range_columns` / `fetch_all_columns` (and `fetch_range_chunks`, chunk after chunk)
give what `fetch_range` / `fetch_all` yield, on every kind of window store (in memory,
RocksDB, transactional with spills, behind a record cache with and without a listener,
read-only views), with either clock."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from spark_statestore import Serdes, Stores, ThreadCache
from spark_statestore.stores.windowed import WindowColumns
from spark_statestore.txn import TransactionalDatabase

KEYS = [b"a", b"ab", b"b", b"c\x00", b"c", b"d"]
KINDS = ["memory", "rocksdb", "txn", "txn-spilling", "cached", "cached-listening"]


def make(kind, path, clock, dups=False, retention=40, size=5, forwarded=None, cache_bytes=600):
    """A window store of `kind`, and what must be closed afterwards; a listening cached
    store forwards its changes (with old values) into `forwarded`."""
    if kind == "memory":
        return Stores.in_memory_window_store("w", retention, size, dups, clock=clock), []
    if kind == "rocksdb":  # segments of 10 ms: expiry deletes ranges often
        store = Stores.persistent_window_store("w", path, retention, size, dups, 10, clock=clock)
        return store, [store]
    db = TransactionalDatabase(path, uncommitted_max_bytes=300 if kind == "txn-spilling" else -1)
    store = db.window_store("w", retention, size, dups, 10, clock=clock)
    if kind.startswith("cached"):
        listener = ([] if forwarded is None else forwarded).extend if kind == "cached-listening" else None
        store = Stores.caching(store, ThreadCache(cache_bytes), on_flush=listener, send_old_values=True)
    return store, [db]


def columns(records):
    """What a record iterator yields, as `WindowColumns`."""
    records = list(records)
    keys, starts = [w.key for w, _ in records], [w.window.start for w, _ in records]
    return WindowColumns(keys, [v for _, v in records], starts)


@pytest.mark.parametrize("clock", ["records", "external"])
@pytest.mark.parametrize("kind", KINDS)
def test_writes_and_reads_by_columns_are_those_record_by_record(tmp_path, kind, clock):
    for seed in range(12):
        rng = random.Random(seed)
        retention, cache_bytes = rng.choice([5, 7, 40]), rng.choice([1, 200, 600])  # every put may evict
        forwarded: dict[str, list] = {"bulk": [], "single": []}
        bulk, close_bulk = make(kind, tmp_path / f"{seed}-bulk", clock, retention=retention,
                                forwarded=forwarded["bulk"], cache_bytes=cache_bytes)
        single, close_single = make(kind, tmp_path / f"{seed}-single", clock, retention=retention,
                                    forwarded=forwarded["single"], cache_bytes=cache_bytes)
        now = 0
        for step in range(60):
            now = max(0, now + rng.randint(-4, 9))
            n = rng.randint(0, 12)
            keys = [rng.choice(KEYS) for _ in range(n)]
            values = [rng.choice([None, b"v%d" % step, b"w%d" % step]) for _ in range(n)]
            starts = [max(0, now - rng.randint(0, 60)) for _ in range(n)]
            bulk.put_columns(keys, values, starts)
            for key, value, start in zip(keys, values, starts):
                single.put(key, value, start)
            if clock == "external" and rng.random() < 0.3:
                for store in (bulk, single):
                    store.advance_stream_time(now)
            if kind != "memory" and kind != "rocksdb" and rng.random() < 0.25:
                commit = rng.random() < 0.7  # a rollback goes back to the committed stream time
                for store in (bulk, single):
                    store.commit({"step": step}) if commit else store.rollback()
            where = (seed, step)
            assert forwarded["bulk"] == forwarded["single"], where  # flushed at the same evictions, alike
            assert bulk.observed_stream_time == single.observed_stream_time, where
            assert bulk.metrics.dropped_records_total == single.metrics.dropped_records_total, where
            lo, hi = sorted(rng.choice(KEYS + [None]) or b"" for _ in range(2))
            t0 = rng.randint(0, now + 5)
            t1 = t0 + rng.randint(0, 40)
            expected = columns(single.fetch_range(lo or None, hi or None, t0, t1))
            assert bulk.fetch_range_columns(lo or None, hi or None, t0, t1) == expected, where
            assert columns(bulk.fetch_range(lo or None, hi or None, t0, t1)) == expected, where
            chunks = list(bulk.fetch_range_chunks(lo or None, hi or None, t0, t1))
            assert [r for c in chunks for r in zip(*c)] == list(zip(*expected)), where
            assert bulk.fetch_all_columns(0, 2**63 - 1) == columns(single.all()), where
        for handle in close_bulk + close_single:
            handle.close()


def test_an_eviction_among_columns_forwards_what_puts_one_by_one_forward(tmp_path):
    """A cache that evicts at every put: a deletion of a window that was flushed, then a
    record far ahead (past the retention): the deletion is forwarded (with the old value),
    as when the records are put one by one (found by a review: taking the stream time of
    the last record first made the deletion's window expired at its eviction)."""
    outcomes = []
    for bulk in (False, True):
        db = TransactionalDatabase(tmp_path / f"db-{bulk}")
        forwarded: list = []
        store = Stores.caching(db.window_store("w", 40, 5, False, 10), ThreadCache(1), forwarded.extend, True)
        store.put(b"k", b"v1", 10)
        store.flush_cache()
        forwarded.clear()
        if bulk:
            store.put_columns([b"k", b"x"], [None, b"y"], [10, 100])
        else:
            store.put(b"k", None, 10)
            store.put(b"x", b"y", 100)
        store.flush_cache()
        outcomes.append(forwarded)
        db.close()
    assert outcomes[1] == outcomes[0]
    assert [(c.key, c.new_value, c.old_value, c.window_start) for c in outcomes[1]] == [
        (b"k", None, b"v1", 10),
        (b"x", b"y", None, 100),
    ]


@pytest.mark.parametrize("kind", ["memory", "rocksdb", "txn"])
def test_columns_of_a_store_with_duplicates_keep_every_put(tmp_path, kind):
    store, handles = make(kind, tmp_path / "w", "records", dups=True)
    store.put_columns([b"k", b"k", b"j", b"k"], [b"1", b"2", b"3", None], [10, 10, 10, 12])
    expected = WindowColumns([b"j", b"k", b"k"], [b"3", b"1", b"2"], [10, 10, 10])
    assert store.fetch_all_columns(0, 20) == expected
    assert store.fetch_all_columns(0, 20) == columns(store.fetch_all(0, 20))
    for handle in handles:
        handle.close()


def test_views_read_columns_at_their_isolation_level(tmp_path):
    db = TransactionalDatabase(tmp_path / "db")
    store = db.window_store("w", 100, 10)
    store.put_columns([b"a", b"b"], [b"1", b"2"], [10, 20])
    store.commit({"x": 1})
    store.put_columns([b"c"], [b"3"], [30])
    committed, uncommitted = store.read_only("READ_COMMITTED"), store.read_only("READ_UNCOMMITTED")
    assert committed.fetch_all_columns(0, 100) == WindowColumns([b"a", b"b"], [b"1", b"2"], [10, 20])
    everything = WindowColumns([b"a", b"b", b"c"], [b"1", b"2", b"3"], [10, 20, 30])
    assert uncommitted.fetch_all_columns(0, 100) == everything
    with pytest.raises(AttributeError):
        committed.put_columns([b"x"], [b"1"], [1])
    db.close()


def test_typed_columns_take_arrow_and_decode_in_bulk(tmp_path):
    db = TransactionalDatabase(tmp_path / "db")
    windows = db.window_store("w", 100, 10).typed(Serdes.string(), Serdes.int64())
    windows.put_columns(pa.array(["x", "y", "x"]), pa.array([1, 2, 3]), pa.array([0, 0, 10]))
    assert windows.fetch_all_columns(0, 10) == WindowColumns(["x", "y", "x"], [1, 2, 3], [0, 0, 10])
    assert windows.fetch_range_columns("y", None, 0, 10) == WindowColumns(["y"], [2], [0])
    assert windows.get_all(["x", "x", "z"], [0, 10, 0]) == [1, 3, None]
    db.close()


@pytest.mark.parametrize("kind", KINDS)
def test_bad_columns_name_the_column_and_index_and_write_nothing(tmp_path, kind):
    store, handles = make(kind, tmp_path / "w", "records")
    store.put(b"k", b"v", 5)
    before = (store.fetch_all_columns(0, 100), store.observed_stream_time)
    cases = [
        (([b"a", "b"], [b"1", b"2"], [1, 2]), TypeError, r"keys\[1\] must be bytes, got str: 'b'"),
        (([b"a", None], [b"1", b"2"], [1, 2]), TypeError, r"keys\[1\] cannot be None"),
        (([b"a", b"b"], [b"1", 2], [1, 2]), TypeError, r"values\[1\] must be bytes or None, got int: 2"),
        (([b"a", b"b"], [b"1", b"2"], [1, -2]), ValueError, r"window_starts\[1\] must be between 0 and"),
        (([b"a", b"b"], [b"1", b"2"], [1, True]), TypeError, r"window_starts\[1\] must be an int"),
        (([b"a", b"b"], [b"1", b"2"], [1, 2**63]), ValueError, r"window_starts\[1\] must be between 0 and"),
        (([b"a", b"b"], [b"1"], [1, 2]), ValueError, "must have the same length, got 2, 1 and 2"),
        ((b"ab", [b"1"], [1]), TypeError, "keys must be a list, got bytes"),
    ]
    for (keys, values, starts), error, message in cases:
        with pytest.raises(error, match=message):
            store.put_columns(keys, values, starts)
        assert (store.fetch_all_columns(0, 100), store.observed_stream_time) == before
    for handle in handles:
        handle.close()


def test_reads_by_columns_check_their_arguments(tmp_path):
    store = Stores.persistent_window_store("w", tmp_path / "w", 40, 5)
    with pytest.raises(ValueError, match="time_from must not be greater than time_to"):
        store.fetch_all_columns(5, 1)
    with pytest.raises(TypeError, match="key_from must be bytes or None, got str"):
        store.fetch_range_columns("a", None, 0, 1)
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.fetch_all_columns(0, 1)
