"""KIP-428 window-store behaviour; every test runs against the in-memory and RocksDB stores."""

from __future__ import annotations

import datetime
import logging

import pytest

from spark_statestore import StoreClosedError, Stores, Window, Windowed

MAX = 2**63 - 1


def keys_and_starts(it):
    return [(w.key, w.window.start) for w, _ in it]


# -- factory validation ------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True])
def test_factory_validation_order_and_messages(tmp_path, persistent):
    def build(name, retention, size, dups=False):
        if persistent:
            return Stores.persistent_window_store(name, tmp_path / "w", retention, size, dups)
        return Stores.in_memory_window_store(name, retention, size, dups)

    with pytest.raises(TypeError, match="^name cannot be None$"):
        build(None, -1, -1)
    with pytest.raises(ValueError, match="^retention_period cannot be negative$"):
        build("w", -1, -1)
    with pytest.raises(ValueError, match="^window_size cannot be negative$"):
        build("w", 10, -1)
    with pytest.raises(
        ValueError,
        match=r"^The retention period of the window store w must be no smaller than its window "
        r"size\. Got size=\[11\], retention=\[10\]$",
    ):
        build("w", 10, 11)
    with pytest.raises(TypeError, match="retention_period must be int milliseconds or a timedelta"):
        build("w", 1.5, 1)
    with pytest.raises(TypeError, match="retain_duplicates must be a bool"):
        build("w", 10, 1, "yes")


def test_factory_accepts_timedelta(window_factory):
    store = window_factory(retention=datetime.timedelta(seconds=2), size=datetime.timedelta(milliseconds=500))
    assert store.retention_period == 2000
    assert store.window_size == 500


# -- put / get / fetch -------------------------------------------------------------------


def test_initial_stream_time_and_metrics(window_factory):
    store = window_factory()
    assert store.observed_stream_time == -1
    assert store.metrics.dropped_records_total == 0


def test_put_get_and_delete(window_factory):
    store = window_factory()
    store.put(b"k", b"v0", 0)
    store.put(b"k", b"v10", 10)
    assert store.get(b"k", 0) == b"v0"
    assert store.get(b"k", 10) == b"v10"
    assert store.get(b"k", 5) is None
    store.put(b"k", b"v0b", 0)
    assert store.get(b"k", 0) == b"v0b"
    store.put(b"k", None, 0)
    assert store.get(b"k", 0) is None
    assert list(store.fetch(b"k", 0, 100)) == [(10, b"v10")]
    assert store.observed_stream_time == 10


def test_fetch_single_key_in_time_order(window_factory):
    store = window_factory(retention=1000)
    for start in [30, 0, 20, 10]:
        for key in [b"a", b"b", b"ab", b"\x00"]:
            store.put(key, key + b"@%d" % start, start)
    assert list(store.fetch(b"a", 0, 100)) == [(t, b"a@%d" % t) for t in (0, 10, 20, 30)]
    assert list(store.fetch(b"a", 10, 20)) == [(10, b"a@10"), (20, b"a@20")]
    assert list(store.backward_fetch(b"a", 5, 30)) == [(t, b"a@%d" % t) for t in (30, 20, 10)]
    assert list(store.fetch(b"zz", 0, 100)) == []
    assert list(store.fetch(b"a", 11, 19)) == []
    assert list(store.fetch(b"\x00", 0, 0)) == [(0, b"\x00@0")]


def test_fetch_range_orders_by_window_start_then_key(window_factory):
    store = window_factory(retention=1000)
    for start in [20, 0, 10]:
        for key in [b"c", b"a", b"b", b"d"]:
            store.put(key, key, start)
    got = keys_and_starts(store.fetch_range(b"b", b"c", 0, 20))
    assert got == [(b"b", 0), (b"c", 0), (b"b", 10), (b"c", 10), (b"b", 20), (b"c", 20)]
    back = keys_and_starts(store.backward_fetch_range(b"b", b"c", 0, 20))
    assert back == list(reversed(got))
    assert keys_and_starts(store.fetch_range(None, b"a", 0, 10)) == [(b"a", 0), (b"a", 10)]
    assert keys_and_starts(store.fetch_range(b"d", None, 10, 20)) == [(b"d", 10), (b"d", 20)]
    everything = keys_and_starts(store.fetch_all(0, 20))
    assert everything == [(k, t) for t in (0, 10, 20) for k in (b"a", b"b", b"c", b"d")]
    assert keys_and_starts(store.backward_fetch_all(0, 20)) == list(reversed(everything))
    assert keys_and_starts(store.all()) == everything
    assert keys_and_starts(store.backward_all()) == list(reversed(everything))
    assert keys_and_starts(store.fetch_all(5, 15)) == [(k, 10) for k in (b"a", b"b", b"c", b"d")]


def test_fetch_range_with_bounds_outside_keys_of_a_window(window_factory):
    store = window_factory(retention=1000)
    store.put(b"a", b"1", 0)
    store.put(b"z", b"2", 0)
    store.put(b"m", b"3", 10)
    store.put(b"a", b"4", 20)
    assert keys_and_starts(store.fetch_range(b"b", b"y", 0, 20)) == [(b"m", 10)]
    assert keys_and_starts(store.backward_fetch_range(b"b", b"y", 0, 20)) == [(b"m", 10)]
    assert keys_and_starts(store.backward_fetch_range(b"m", None, 0, 20)) == [(b"m", 10), (b"z", 0)]
    assert keys_and_starts(store.backward_fetch_range(None, b"b", 0, 20)) == [(b"a", 20), (b"a", 0)]


def test_windowed_keys_carry_window_bounds_and_clamp_end(window_factory):
    store = window_factory(retention=MAX, size=100)
    store.put(b"k", b"v", 5)
    store.put(b"k", b"w", MAX - 10)
    (w1, v1), (w2, v2) = list(store.fetch_range(b"k", b"k", 0, MAX))
    assert w1 == Windowed(b"k", Window(5, 105)) and v1 == b"v"
    assert w2.window == Window(MAX - 10, MAX) and v2 == b"w"
    assert w1.window.start == 5 and w1.window.end == 105


def test_keys_that_prefix_each_other_stay_apart(window_factory):
    store = window_factory(retention=1000)
    for key in [b"a", b"a\x00", b"a\x00\x01", b"ab"]:
        store.put(key, key, 7)
    assert list(store.fetch(b"a", 0, 10)) == [(7, b"a")]
    assert list(store.fetch(b"a\x00", 0, 10)) == [(7, b"a\x00")]
    assert keys_and_starts(store.fetch_range(b"a", b"a\x00", 0, 10)) == [(b"a", 7), (b"a\x00", 7)]


# -- retention and late records ----------------------------------------------------------


def test_records_expire_with_stream_time(window_factory):
    store = window_factory(retention=100, size=10)
    store.put(b"k", b"old", 0)
    store.put(b"k", b"mid", 50)
    store.put(b"k", b"new", 100)  # 0 <= 100 - 100: window 0 has expired
    assert store.observed_stream_time == 100
    assert store.get(b"k", 0) is None
    assert list(store.fetch(b"k", 0, 200)) == [(50, b"mid"), (100, b"new")]
    assert keys_and_starts(store.all()) == [(b"k", 50), (b"k", 100)]
    assert list(store.backward_fetch(b"k", 0, 200)) == [(100, b"new"), (50, b"mid")]
    store.put(b"k", b"newest", 150)
    assert list(store.fetch(b"k", 0, 200)) == [(100, b"new"), (150, b"newest")]


def test_late_records_are_dropped_and_counted(window_factory):
    store = window_factory(retention=100, size=10)
    store.put(b"k", b"v", 500)
    store.put(b"k", b"late", 400)  # 400 <= 500 - 100
    store.put(b"k", None, 399)
    store.put(b"k", b"live", 401)
    assert store.metrics.dropped_records_total == 2
    assert store.get(b"k", 400) is None
    assert list(store.fetch(b"k", 0, 1000)) == [(401, b"live"), (500, b"v")]
    assert store.observed_stream_time == 500


def test_zero_retention_keeps_nothing(window_factory):
    store = window_factory(retention=0, size=0)
    store.put(b"k", b"v", 10)
    assert store.get(b"k", 10) is None
    assert list(store.all()) == []
    assert store.metrics.dropped_records_total == 1


# -- duplicates --------------------------------------------------------------------------


def test_retain_duplicates_keeps_every_put_in_order(window_factory):
    store = window_factory(retention=1000, retain_duplicates=True)
    for i in range(5):
        store.put(b"k", b"v%d" % i, 10)
    store.put(b"k", None, 10)  # a no-op with retain_duplicates
    store.put(b"j", b"j0", 10)
    store.put(b"k", b"w0", 20)
    assert list(store.fetch(b"k", 0, 100)) == [(10, b"v%d" % i) for i in range(5)] + [(20, b"w0")]
    assert list(store.backward_fetch(b"k", 0, 100)) == [(20, b"w0")] + [
        (10, b"v%d" % i) for i in reversed(range(5))
    ]
    assert [(w.key, v) for w, v in store.fetch_all(10, 10)] == [(b"j", b"j0")] + [
        (b"k", b"v%d" % i) for i in range(5)
    ]
    assert [(w.key, v) for w, v in store.backward_fetch_all(10, 10)] == [
        (b"k", b"v%d" % i) for i in reversed(range(5))
    ] + [(b"j", b"j0")]
    assert store.get(b"k", 10) == b"v4"


def test_duplicates_of_prefix_keys_do_not_interleave(window_factory):
    store = window_factory(retention=1000, retain_duplicates=True)
    for i in range(3):
        store.put(b"a", b"a%d" % i, 5)
        store.put(b"a\x00", b"z%d" % i, 5)
    assert [(w.key, v) for w, v in store.fetch_range(b"a", b"a\x00", 0, 10)] == [
        (b"a", b"a0"),
        (b"a", b"a1"),
        (b"a", b"a2"),
        (b"a\x00", b"z0"),
        (b"a\x00", b"z1"),
        (b"a\x00", b"z2"),
    ]
    assert list(store.fetch(b"a", 0, 10)) == [(5, b"a0"), (5, b"a1"), (5, b"a2")]


# -- bad input ---------------------------------------------------------------------------


def test_bad_input_names_parameter_and_value_and_changes_nothing(window_factory):
    store = window_factory()
    store.put(b"k", b"v", 5)
    with pytest.raises(TypeError, match="^key cannot be None$"):
        store.put(None, b"v", 5)
    with pytest.raises(TypeError, match="key must be bytes, got str: 'k'"):
        store.put("k", b"v", 5)
    with pytest.raises(ValueError, match="window_start must be between 0 and .* got -1"):
        store.put(b"k", b"v", -1)
    with pytest.raises(TypeError, match="window_start must be an int number of milliseconds, got float: 1.5"):
        store.put(b"k", b"v", 1.5)
    with pytest.raises(TypeError, match="window_start must be an int number of milliseconds, got bool"):
        store.put(b"k", b"v", True)
    with pytest.raises(ValueError, match="time_from must not be greater than time_to, got time_from=9, time_to=3"):
        store.fetch(b"k", 9, 3)
    with pytest.raises(ValueError, match="time_from must be between"):
        store.fetch_all(-5, 3)
    with pytest.raises(TypeError, match="value must be bytes or None, got str: 'x'"):
        store.put(b"k", "x", 5)
    assert list(store.fetch(b"k", 0, 100)) == [(5, b"v")]
    assert store.observed_stream_time == 5


def test_inverted_key_range_is_empty_and_warns(window_factory, caplog):
    store = window_factory()
    store.put(b"a", b"1", 0)
    store.put(b"z", b"2", 0)
    with caplog.at_level(logging.WARNING, logger="spark_statestore.stores"):
        assert list(store.fetch_range(b"z", b"a", 0, 10)) == []
        assert list(store.backward_fetch_range(b"z", b"a", 0, 10)) == []
    assert sum("the key range is invalid" in r.getMessage() for r in caplog.records) == 2


def test_closed_store_raises_and_its_iterators_end(window_factory):
    store = window_factory()
    for t in range(5):
        store.put(b"k", b"v", t)
    fetch_it = store.fetch(b"k", 0, 10)
    range_it = store.all()
    assert next(fetch_it) == (0, b"v")
    assert next(range_it)[0].window.start == 0
    store.close()
    assert list(fetch_it) == []
    assert list(range_it) == []
    with pytest.raises(StoreClosedError):
        store.put(b"k", b"v", 1)
    with pytest.raises(StoreClosedError):
        store.fetch(b"k", 0, 1)
    with pytest.raises(StoreClosedError):
        store.get(b"k", 1)


def test_iterator_peek_returns_window_start_or_windowed(window_factory):
    store = window_factory()
    store.put(b"k", b"v", 3)
    it = store.fetch(b"k", 0, 10)
    assert it.peek_next_key() == 3
    it2 = store.fetch_all(0, 10)
    assert it2.peek_next_key() == Windowed(b"k", Window(3, 13))
    list(it)
    with pytest.raises(StopIteration):
        it.peek_next_key()


# -- iterator semantics specific to an implementation ------------------------------------


def test_in_memory_iterators_are_live_views():
    store = Stores.in_memory_window_store("w", 1000, 10)
    store.put(b"a", b"1", 0)
    store.put(b"c", b"1", 0)
    it = store.fetch_all(0, 100)
    assert next(it)[0].key == b"a"
    store.put(b"b", b"new", 0)  # ahead of the iterator: seen
    store.put(b"a", b"behind", 50)  # later window: seen
    assert [(w.key, w.window.start, v) for w, v in it] == [
        (b"b", 0, b"new"),
        (b"c", 0, b"1"),
        (b"a", 50, b"behind"),
    ]
    fetch = store.fetch(b"a", 0, 100)
    assert next(fetch) == (0, b"1")
    store.put(b"a", b"2", 70)
    assert list(fetch) == [(50, b"behind"), (70, b"2")]


def test_in_memory_expiry_waits_for_open_iterators():
    store = Stores.in_memory_window_store("w", 100, 10)
    for t in (0, 10, 20):
        store.put(b"k", b"v%d" % t, t)
    it = store.fetch(b"k", 0, 1000)
    assert next(it) == (0, b"v0")
    store.put(b"k", b"v500", 500)  # everything before 401 has expired
    # the open iterator still returns what it had not passed when expiry came
    assert list(it) == [(10, b"v10"), (20, b"v20"), (500, b"v500")]
    # new reads never return expired records
    assert list(store.fetch(b"k", 0, 1000)) == [(500, b"v500")]
    assert store.get(b"k", 10) is None
    # once no iterator holds them, expired segments are freed at the next operation
    store.put(b"k", b"v501", 501)
    assert list(store._segments.data) == [500, 501]


def test_in_memory_expiry_frees_segments_immediately_without_iterators():
    store = Stores.in_memory_window_store("w", 100, 10)
    for t in range(0, 300, 10):
        store.put(b"k", b"v", t)
    assert min(store._segments.data) == 200  # 190 <= 290 - 100


def test_persistent_iterators_see_everything_written_before_open(tmp_path):
    store = Stores.persistent_window_store("w", tmp_path / "w", 1000, 10)
    for t in range(5):
        store.put(b"k", b"v", t)
    it = store.all()
    assert len(list(it)) == 5
    store.close()


def test_persistent_window_store_reopens_with_data_stream_time_and_sequence(tmp_path):
    path = tmp_path / "w"
    store = Stores.persistent_window_store("w", path, 1000, 10, True)
    store.put(b"k", b"a", 100)
    store.put(b"k", b"b", 100)
    store.commit()
    store.close()
    store = Stores.persistent_window_store("w", path, 1000, 10, True)
    assert store.observed_stream_time == 100
    store.put(b"k", b"c", 100)
    assert [v for _, v in store.fetch(b"k", 0, 200)] == [b"a", b"b", b"c"]
    store.close()
    with pytest.raises(ValueError, match="was created as"):
        Stores.persistent_window_store("w", path, 1000, 10, False)


def test_persistent_expiry_drops_whole_segments(tmp_path):
    store = Stores.persistent_window_store("w", tmp_path / "w", 100, 10, segment_interval=50)
    for t in range(0, 1000, 5):
        store.put(b"k%d" % (t % 3), b"v", t)
    store.commit()
    raw = [k for k, _ in store.keyspace.committed.scan(None, b"\x80")]
    starts = sorted({int.from_bytes(k[:8], "big") for k in raw})
    # live from 896 on; whole 50 ms segments below the live range are gone
    assert starts[0] == 850
    assert [w.window.start for w, _ in store.fetch_all(0, 2000)][0] == 900
    store.close()


# -- an external clock ---------------------------------------------------------------------


def test_external_clock_only_advance_stream_time_moves_stream_time(window_factory, tmp_path):
    if window_factory.kind == "memory":
        store = Stores.in_memory_window_store("w", 100, 10, clock="external")
    else:
        store = Stores.persistent_window_store("w", tmp_path / "ext", 100, 10, segment_interval=10, clock="external")
    store.put(b"a", b"far", 5000)  # does not move the clock: nothing expires
    store.put(b"a", b"early", 0)
    assert store.observed_stream_time == -1
    assert [t for t, _ in store.fetch(b"a", 0, 10_000)] == [0, 5000]
    store.advance_stream_time(150)  # live from 51 on
    assert store.observed_stream_time == 150
    assert [t for t, _ in store.fetch(b"a", 0, 10_000)] == [5000]
    store.put(b"b", b"late", 50)
    assert store.metrics.dropped_records_total == 1
    store.advance_stream_time(100)  # earlier times change nothing
    assert store.observed_stream_time == 150
    with pytest.raises(ValueError, match="time must be between 0"):
        store.advance_stream_time(-5)
    if store.persistent:
        store.commit()
        store.close()
        store = Stores.persistent_window_store("w", tmp_path / "ext", 100, 10, segment_interval=10, clock="external")
        assert store.observed_stream_time == 150
    store.close()
    with pytest.raises(ValueError, match="clock must be one of"):
        Stores.in_memory_window_store("w", 100, 10, clock="wall")


def test_cached_store_with_external_clock_passes_advances_to_the_store():
    from spark_statestore import ThreadCache

    inner = Stores.in_memory_window_store("w", 100, 10, clock="external")
    cached = Stores.caching(inner, ThreadCache(10_000))
    cached.put(b"a", b"1", 500)
    assert cached.observed_stream_time == -1
    cached.advance_stream_time(550)  # reaches the store at once, even with nothing to flush
    assert cached.observed_stream_time == 550 and inner.observed_stream_time == 550
    assert list(inner.fetch(b"a", 0, 1000)) == []
    cached.flush()
    assert list(inner.fetch(b"a", 0, 1000)) == [(500, b"1")]


def test_fetches_of_a_range_that_expired_entirely_are_empty_behind_a_cache(tmp_path):
    """A cached store narrows a fetch to its live windows before asking the store below:
    a range that expired entirely must be empty, not an inverted range for that store."""
    from spark_statestore import ThreadCache

    inner = Stores.persistent_window_store("w", tmp_path / "db", 100, 10)
    store = Stores.caching(inner, ThreadCache(10_000))
    store.put(b"k", b"v", 0)
    store.put(b"k", b"w", 500)  # stream time 500: windows up to 400 expired
    assert list(store.fetch_all(0, 300)) == []
    assert list(store.fetch(b"k", 0, 300)) == []
    assert list(store.backward_fetch_range(None, None, 0, 400)) == []
    store.close()
