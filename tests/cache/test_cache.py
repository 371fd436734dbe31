"""The record cache (KIP-63): budget, eviction, de-duplicated flushes, merged reads,
transactions, window stores and the per-task budget."""

from __future__ import annotations

import random

import pytest

from spark_statestore import Change, StateStoreError, Stores, ThreadCache
from spark_statestore.cache import entry_size
from spark_statestore.txn.budget import ENTRY_COST


def cached_kv(cache, send_old_values=False, inner=None, **kwargs):
    forwarded: list[Change] = []
    inner = inner or Stores.in_memory_key_value_store("kv")
    store = Stores.caching(inner, cache, on_flush=forwarded.extend, send_old_values=send_old_values, **kwargs)
    return store, inner, forwarded


# -- ThreadCache ---------------------------------------------------------------------------


def test_entry_size_and_counters():
    cache = ThreadCache(10_000)
    store, inner, _ = cached_kv(cache)
    store.put(b"key", b"value")
    assert cache.size_bytes == entry_size(b"kkk", b"vvvvv")
    store.put(b"key", b"v")
    assert cache.size_bytes == entry_size(b"kkk", b"v")
    assert cache.overwrites == 1
    assert store.get(b"key") == b"v"
    assert (cache.hits, cache.misses) == (1, 0)
    inner.put(b"other", b"x")
    assert store.get(b"other") == b"x"  # a miss fills the cache with a clean entry
    assert store.get(b"other") == b"x"
    assert (cache.hits, cache.misses) == (2, 1)
    assert store.get(b"absent") is None  # misses are not cached
    assert store.get(b"absent") is None
    assert cache.misses == 3


def test_size_never_exceeds_budget_and_lru_is_evicted():
    cache = ThreadCache(3 * entry_size(b"kk", b"v"))
    store, inner, forwarded = cached_kv(cache)
    for key in (b"k1", b"k2", b"k3"):
        store.put(key, b"v")
    store.flush()
    forwarded.clear()
    store.get(b"k1")  # k1 becomes most recently used: k2 is now the eldest
    store.put(b"k4", b"v")
    assert cache.size_bytes <= cache.max_bytes
    assert cache.evicts == 1
    assert b"k2" not in store.named_cache.entries and b"k1" in store.named_cache.entries
    rng = random.Random(0)
    for _ in range(500):
        store.put(b"k%d" % rng.randrange(50), b"x" * rng.randrange(10))
        assert cache.size_bytes <= cache.max_bytes


def test_evicting_a_dirty_entry_flushes_the_stores_dirty_entries_first():
    cache = ThreadCache(2 * entry_size(b"k", b"v"))
    store, inner, forwarded = cached_kv(cache)
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    assert list(inner.all()) == []
    store.put(b"c", b"3")  # evicts a (dirty): every dirty entry is flushed first
    assert list(inner.all()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert [c.key for c in forwarded] == [b"a", b"b", b"c"]
    assert cache.flushes == 1 and cache.evicts == 1
    assert list(store.named_cache.entries.data) == [b"b", b"c"]  # clean now


def test_bulk_and_single_reads_and_writes_keep_recency_and_write_order():
    """Rewrites of a few keys, in bulk (`get_all`, `put_all`) and one by one: a flush
    forwards each key once in the order of its latest write, and eviction takes the least
    recently used."""
    cache = ThreadCache(1 << 20)
    store, inner, forwarded = cached_kv(cache)
    keys = [b"k%d" % i for i in range(10)]
    for round in range(1000, 2000):
        if round % 2:
            store.put_all([(key, b"v%d" % round) for key in keys])
        else:
            for key in keys:
                store.put(key, b"v%d" % round)
        store.get_all(keys)
    named = store.named_cache
    assert (cache.hits, cache.overwrites) == (10_000, 9_990)
    for key in reversed(keys):
        store.get(key)  # least recently used first: k9 ... k4, k3, k2, k1, k0
    store.put(b"k3", b"v9999")  # then k3
    store.flush()
    assert [c.key for c in forwarded] == keys[:3] + keys[4:] + [b"k3"]
    assert list(inner.all()) == sorted((key, b"v9999" if key == b"k3" else b"v1999") for key in keys)
    cache.resize(2 * entry_size(b"k0", b"v1999"))
    assert sorted(named.entries.data) == [b"k0", b"k3"] and cache.evicts == 8


def test_resize_shrinks_by_evicting():
    cache = ThreadCache(100_000)
    one, inner_one, _ = cached_kv(cache)
    two, inner_two, _ = cached_kv(cache)
    for i in range(20):
        one.put(b"a%02d" % i, b"x" * 10)
        two.put(b"b%02d" % i, b"y" * 10)
    cache.resize(5 * entry_size(b"kkk", b"vvvvvvvvvv"))
    assert cache.size_bytes <= cache.max_bytes
    assert len(one.named_cache) + len(two.named_cache) == 5
    # nothing was lost: evicted dirty entries went to their stores
    assert len(list(one.all())) == 20 and len(list(two.all())) == 20
    with pytest.raises(ValueError, match="max_bytes must be at least 0, got -1"):
        cache.resize(-1)


# -- caching key-value stores --------------------------------------------------------------


def test_writes_stay_in_cache_until_flush_and_only_latest_values_are_forwarded():
    store, inner, forwarded = cached_kv(ThreadCache(10_000))
    for i in range(5):
        store.put(b"counter", b"%d" % i)
    store.put(b"other", b"x")
    store.put(b"counter", b"final")
    assert inner.get(b"counter") is None
    assert store.get(b"counter") == b"final"
    store.flush()
    assert forwarded == [Change(b"other", b"x", None), Change(b"counter", b"final", None)]
    assert list(inner.all()) == [(b"counter", b"final"), (b"other", b"x")]
    store.flush()  # nothing dirty: nothing forwarded
    assert len(forwarded) == 2


def test_old_values_are_the_stores_values_before_the_flush():
    store, inner, forwarded = cached_kv(ThreadCache(10_000), send_old_values=True)
    inner.put(b"a", b"old")
    store.put(b"a", b"mid")
    store.put(b"a", b"new")
    store.put(b"b", b"fresh")
    store.flush()
    assert forwarded == [Change(b"a", b"new", b"old"), Change(b"b", b"fresh", None)]


def test_a_new_key_put_and_deleted_between_flushes_is_neither_forwarded_nor_written():
    store, inner, forwarded = cached_kv(ThreadCache(10_000))
    inner.put(b"existing", b"1")
    store.put(b"temp", b"x")
    store.delete(b"temp")
    store.delete(b"existing")
    store.flush()
    assert forwarded == [Change(b"existing", None, None)]
    assert list(inner.all()) == []


def test_ranges_merge_cache_and_store_with_tombstones_hiding_store_entries():
    store, inner, _ = cached_kv(ThreadCache(10_000))
    for key in (b"a", b"b", b"c", b"d"):
        inner.put(key, b"store")
    store.put(b"b", b"cache")
    store.put(b"bb", b"cache")
    store.delete(b"c")
    expected = [(b"a", b"store"), (b"b", b"cache"), (b"bb", b"cache"), (b"d", b"store")]
    assert list(store.all()) == expected
    assert list(store.reverse_all()) == expected[::-1]
    assert list(store.range(b"b", b"c")) == expected[1:3]
    assert list(store.prefix_scan(b"b")) == expected[1:3]
    assert list(store.reverse_range(b"a", b"bb")) == expected[:3][::-1]


def test_zero_budget_is_write_through():
    store, inner, forwarded = cached_kv(ThreadCache(0))
    store.put(b"a", b"1")
    assert inner.get(b"a") == b"1"
    assert forwarded == [Change(b"a", b"1", None)]
    store.put(b"a", b"2")
    assert forwarded[-1] == Change(b"a", b"2", None)
    assert store.get(b"a") == b"2"
    assert store.named_cache.size_bytes == 0


def test_reentrant_listener_writes_back_and_terminates():
    cache = ThreadCache(10_000)
    inner = Stores.in_memory_key_value_store("kv")
    calls = []

    def listener(changes):
        calls.append([c.key for c in changes])
        for change in changes:
            if not change.key.startswith(b"echo-"):
                store.put(b"echo-" + change.key, change.new_value)  # writes while being called

    store = Stores.caching(inner, cache, on_flush=listener)
    store.put(b"a", b"1")
    store.flush()
    assert calls == [[b"a"]]
    assert store.get(b"echo-a") == b"1"  # the re-entrant write is a new dirty entry
    store.flush()
    assert calls == [[b"a"], [b"echo-a"]]
    store.flush()
    assert len(calls) == 2


def test_reentrant_listener_that_causes_evictions_terminates():
    cache = ThreadCache(3 * entry_size(b"kkkkkkkk", b"v"))
    inner = Stores.in_memory_key_value_store("kv")
    seen = []

    def listener(changes):
        seen.extend(c.key for c in changes)
        if len(seen) < 50:
            for change in changes:
                store.put(b"x" + change.key[-7:], b"1")

    store = Stores.caching(inner, cache, on_flush=listener)
    for i in range(5):
        store.put(b"key%05d" % i, b"1")
    store.flush()
    assert cache.size_bytes <= cache.max_bytes
    assert len(seen) >= 5


def test_caching_over_a_transactional_store(tmp_path):
    path = tmp_path / "db"
    cache = ThreadCache(10_000)
    inner = Stores.persistent_key_value_store("kv", path)
    store = Stores.caching(inner, cache)
    store.put(b"a", b"1")
    store.commit({"n": 1})  # the cache is flushed first, so the commit has the write
    assert store.committed_offset("n") == 1
    store.put(b"a", b"2")
    store.put(b"b", b"2")
    store.flush()  # now in the store's transaction, and clean in the cache
    store.put(b"c", b"3")
    store.rollback()  # drops dirty and clean cache entries with the transaction
    assert list(store.all()) == [(b"a", b"1")]
    assert store.approximate_num_uncommitted_bytes() == 0
    store.put(b"d", b"4")
    assert store.approximate_num_uncommitted_bytes() == 2 + ENTRY_COST  # the dirty entry's bytes and record
    assert store.read_only("READ_COMMITTED").get(b"d") is None
    store.close()
    reopened = Stores.persistent_key_value_store("kv", path)
    assert list(reopened.all()) == [(b"a", b"1")]
    reopened.close()
    with pytest.raises(TypeError, match="store 'kv' is not transactional: it has no commit"):
        Stores.caching(Stores.in_memory_key_value_store("kv"), cache).commit()


def test_namespaces_keep_clean_entries_and_refuse_unflushed_writes():
    cache = ThreadCache(10_000)
    inner = Stores.in_memory_key_value_store("kv")
    first = Stores.caching(inner, cache, namespace="p0/kv")
    first.put(b"a", b"1")
    first.flush()
    other = Stores.caching(Stores.in_memory_key_value_store("kv"), cache, namespace="p0/kv")
    assert other.get(b"a") == b"1"  # served by the cache filled through the first wrapper
    other.put(b"b", b"2")
    with pytest.raises(StateStoreError, match="named cache 'p0/kv' holds unflushed writes"):
        Stores.caching(Stores.in_memory_key_value_store("kv"), cache, namespace="p0/kv")
    other.close()  # unflushed writes are dropped with the store
    assert b"b" not in cache.named_cache("p0/kv").entries
    assert b"a" in cache.named_cache("p0/kv").entries
    anonymous = Stores.caching(Stores.in_memory_key_value_store("x"), cache)
    namespace = anonymous.named_cache.namespace
    anonymous.close()
    assert namespace not in cache.namespaces


def test_factory_argument_errors():
    cache = ThreadCache(10)
    with pytest.raises(TypeError, match="cache must be a ThreadCache"):
        Stores.caching(Stores.in_memory_key_value_store("kv"), {"max": 1})
    with pytest.raises(TypeError, match="store must be a KeyValueStore or WindowStore"):
        Stores.caching(Stores.in_memory_key_value_store("kv").typed(_Str(), _Str()), cache)
    with pytest.raises(TypeError, match="on_flush must be callable"):
        Stores.caching(Stores.in_memory_key_value_store("kv"), cache, on_flush=5)
    with pytest.raises(ValueError, match="max_bytes must be at least 0, got -5"):
        ThreadCache(-5)


class _Str:
    def encode(self, v):
        return v.encode()

    def decode(self, b):
        return b.decode()


# -- caching window stores -----------------------------------------------------------------


@pytest.fixture(params=["memory", "rocksdb"])
def window_inner(request, tmp_path):
    if request.param == "memory":
        store = Stores.in_memory_window_store("w", 100, 10)
    else:
        store = Stores.persistent_window_store("w", tmp_path / "w", 100, 10, segment_interval=10)
    yield store
    store.close()


def test_cached_window_store_merges_reads_and_forwards_window_starts(window_inner):
    forwarded = []
    store = Stores.caching(window_inner, ThreadCache(10_000), on_flush=forwarded.extend, send_old_values=True)
    window_inner.put(b"a", b"stored", 0)
    window_inner.put(b"b", b"stored", 10)
    store.put(b"a", b"cached", 10)
    store.put(b"b", None, 10)  # hides the store's record
    store.put(b"c", b"cached", 0)
    assert store.get(b"a", 0) == b"stored" and store.get(b"a", 10) == b"cached"
    assert list(store.fetch(b"a", 0, 100)) == [(0, b"stored"), (10, b"cached")]
    assert list(store.backward_fetch(b"a", 0, 100)) == [(10, b"cached"), (0, b"stored")]
    assert [(w.key, w.window.start, v) for w, v in store.all()] == [
        (b"a", 0, b"stored"),
        (b"c", 0, b"cached"),
        (b"a", 10, b"cached"),
    ]
    assert [(w.key, w.window.start) for w, _ in store.backward_fetch_range(b"b", b"c", 0, 100)] == [(b"c", 0)]
    assert next(store.fetch_all(10, 10))[0].window.end == 20
    store.flush()
    assert forwarded == [
        Change(b"a", b"cached", None, 10),
        Change(b"b", None, b"stored", 10),
        Change(b"c", b"cached", None, 0),
    ]
    assert [(w.key, w.window.start, v) for w, v in window_inner.all()] == [
        (b"a", 0, b"stored"),
        (b"c", 0, b"cached"),
        (b"a", 10, b"cached"),
    ]


def test_cached_window_store_drops_late_records_and_hides_expired_windows(window_inner):
    store = Stores.caching(window_inner, ThreadCache(10_000))
    store.put(b"k", b"v0", 0)
    store.put(b"k", b"v500", 500)  # window 0 has expired (in the cache only so far)
    assert store.observed_stream_time == 500
    assert store.get(b"k", 0) is None
    assert list(store.fetch(b"k", 0, 1000)) == [(500, b"v500")]
    store.put(b"k", b"late", 300)
    assert store.metrics.dropped_records_total == 1
    assert store.get(b"k", 300) is None


def test_duplicate_window_stores_cannot_be_cached():
    with pytest.raises(ValueError, match="retains duplicates and cannot be cached"):
        Stores.caching(Stores.in_memory_window_store("w", 100, 10, True), ThreadCache(100))
