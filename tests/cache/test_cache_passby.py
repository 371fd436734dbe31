"""Where the record cache cannot help (a transactional store, no flush listener), its bulk
calls pass it by; they go through it again as soon as it holds a write or a listener is
set. Reads must always equal an uncached twin's, whichever way each call went."""

from __future__ import annotations

import random

import pytest

from spark_statestore import Stores, ThreadCache
from spark_statestore.cache import entry_size

KEYS = [b"k%d" % i for i in range(12)]


def test_bulk_calls_pass_a_cache_without_listener_over_a_transactional_store(tmp_path):
    inner = Stores.persistent_key_value_store("kv", tmp_path / "db")
    store = Stores.caching(inner, ThreadCache(1 << 20))
    store.put_all([(b"a", b"1"), (b"b", b"2")])
    assert len(store.named_cache) == 0 and inner.get(b"a") == b"1"  # in the store's transaction at once
    assert store.get_all([b"a", b"b", b"c"]) == [b"1", b"2", None]
    assert len(store.named_cache) == 0  # nor do bulk reads fill it
    store.put(b"a", b"3")  # a single put waits in the cache...
    store.put_all([(b"b", b"4")])  # ...so bulk calls go through it now
    assert inner.get(b"a") == b"1" and inner.get(b"b") == b"2"
    assert store.get_all([b"a", b"b"]) == [b"3", b"4"]
    store.commit({"n": 1})
    assert store.read_only("READ_COMMITTED").get_all([b"a", b"b"]) == [b"3", b"4"]
    store.close()


def test_a_bulk_write_drops_the_clean_entries_it_replaces(tmp_path):
    inner = Stores.persistent_key_value_store("kv", tmp_path / "db")
    store = Stores.caching(inner, ThreadCache(1 << 20))
    store.put_all([(b"a", b"1")])
    assert store.get(b"a") == b"1"  # a single read fills the cache with a clean entry
    assert len(store.named_cache) == 1 and not store.named_cache.dirty
    store.put_all([(b"a", b"2")])  # passes by: the clean entry must not hide it
    assert len(store.named_cache) == 0
    assert store.get(b"a") == b"2" and store.get_all([b"a"]) == [b"2"]
    store.close()


def test_columns_pass_by_as_columns_and_drop_the_clean_entries_they_replace(tmp_path):
    inner = Stores.persistent_key_value_store("kv", tmp_path / "db")
    store = Stores.caching(inner, ThreadCache(1 << 20))
    store.put_columns([b"a", b"b"], [b"1", b"2"])
    assert len(store.named_cache) == 0 and inner.get(b"a") == b"1"
    assert store.get(b"a") == b"1"  # a clean entry
    store.put_columns([b"a", b"c"], [b"3", None])  # must not be hidden by it
    assert len(store.named_cache) == 0 and store.get(b"a") == b"3" and inner.get(b"a") == b"3"
    with pytest.raises(ValueError, match="same length"):
        store.put_columns([b"a"], [])
    with pytest.raises(TypeError):
        store.put_columns([b"a", "b"], [b"1", b"2"])
    assert list(store.all()) == [(b"a", b"3"), (b"b", b"2")]  # nothing of the bad calls written
    store.close()


def test_a_listener_puts_bulk_writes_back_through_the_cache(tmp_path):
    inner = Stores.persistent_key_value_store("kv", tmp_path / "db")
    store = Stores.caching(inner, ThreadCache(1 << 20))
    forwarded = []
    store.set_flush_listener(forwarded.extend)
    store.put_all([(b"a", b"1"), (b"a", b"2")])
    store.put_all([(b"a", b"3"), (b"b", b"1")])
    assert inner.get(b"a") is None  # waiting in the cache
    store.commit({"n": 1})
    assert [(c.key, c.new_value) for c in forwarded] == [(b"a", b"3"), (b"b", b"1")]  # one change per key
    store.close()


def test_window_bulk_calls_pass_by_with_the_stores_stream_time(tmp_path):
    inner = Stores.persistent_window_store("w", tmp_path / "db", 100, 10)
    store = Stores.caching(inner, ThreadCache(1 << 20))
    store.put(b"a", b"1", 0)  # through the cache: it advances the cache's stream time
    store.flush()  # which the store now has
    store.put_all([(b"a", b"2", 10), (b"b", b"1", 200)])
    assert len(store.named_cache) == 1 and not store.named_cache.dirty  # only the flushed entry, clean
    assert store.observed_stream_time == inner.observed_stream_time == 200
    store.put_all([(b"c", b"1", 50)])  # late against 200 - 100: dropped, as the cache would
    assert inner.metrics.dropped_records_total == 1
    assert store.get_all([b"a", b"b", b"c"], [10, 200, 50]) == [None, b"1", None]
    store.close()


@pytest.mark.parametrize("kind", ["kv", "window"])
@pytest.mark.parametrize("budget", [0, 4 * entry_size(b"k10", b"vv"), 1 << 20])
def test_random_mixes_of_single_and_bulk_calls_read_like_an_uncached_store(tmp_path, kind, budget):
    for seed in range(25):
        rng = random.Random(seed)
        if kind == "window":
            inner = Stores.persistent_window_store("w", tmp_path / f"{seed}-c", 40, 5)
            twin = Stores.persistent_window_store("w", tmp_path / f"{seed}-t", 40, 5)
        else:
            inner = Stores.persistent_key_value_store("kv", tmp_path / f"{seed}-c")
            twin = Stores.persistent_key_value_store("kv", tmp_path / f"{seed}-t")
        cached = Stores.caching(inner, ThreadCache(budget))
        listening = []
        now = 0
        for step in range(120):
            op = rng.random()
            if kind == "window":
                now = max(0, now + rng.randint(-3, 4))
            records = [(rng.choice(KEYS), rng.choice([None, b"v%d" % step]), max(0, now - rng.randint(0, 50))) for _ in range(rng.randint(1, 6))]
            if op < 0.2:
                for key, value, start in records:
                    for store in (cached, twin):
                        store.put(key, value, start) if kind == "window" else store.put(key, value)
            elif op < 0.35:
                for store in (cached, twin):
                    store.put_all(records if kind == "window" else [(k, v) for k, v, _ in records])
            elif op < 0.45:  # columns: straight to the store where the cache holds nothing
                keys, values, starts = (list(column) for column in zip(*records))
                for store in (cached, twin):
                    store.put_columns(keys, values, starts) if kind == "window" else store.put_columns(keys, values)
            elif op < 0.6:
                key, _, start = records[0]
                if kind == "window":
                    assert cached.get(key, start) == twin.get(key, start), (seed, step)
                else:
                    assert cached.get(key) == twin.get(key), (seed, step)
            elif op < 0.75:
                keys, starts = [k for k, _, _ in records], [s for _, _, s in records]
                args = (keys, starts) if kind == "window" else (keys,)
                assert cached.get_all(*args) == twin.get_all(*args), (seed, step)
            elif op < 0.85:
                for store in (cached, twin):
                    store.commit({"step": step})
            elif op < 0.9:
                for store in (cached, twin):
                    store.rollback()
            elif op < 0.95:
                cached.flush()
            else:  # a listener comes or goes: bulk calls change course
                cached.set_flush_listener(None if listening else listening.extend)
                listening = [] if listening else listening
            assert list(cached.all()) == list(twin.all()), (seed, step)
        for store in (cached, twin):
            store.commit({"step": -1})
        committed = [list(s.read_only("READ_COMMITTED").all()) for s in (cached, twin)]
        assert committed[0] == committed[1], seed
        cached.close()
        twin.close()
