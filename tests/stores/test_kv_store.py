"""Behaviour of key-value stores; every test runs against every implementation."""

from __future__ import annotations

import logging

import pytest

from spark_statestore import StoreClosedError, Stores


def test_put_get_overwrite_and_delete_by_none(kv_store):
    assert kv_store.get(b"k") is None
    kv_store.put(b"k", b"1")
    assert kv_store.get(b"k") == b"1"
    kv_store.put(b"k", b"2")
    assert kv_store.get(b"k") == b"2"
    kv_store.put(b"k", None)
    assert kv_store.get(b"k") is None
    assert list(kv_store.all()) == []


def test_delete_returns_previous(kv_store):
    kv_store.put(b"k", b"v")
    assert kv_store.delete(b"k") == b"v"
    assert kv_store.delete(b"k") is None
    assert kv_store.get(b"k") is None


def test_put_if_absent_keeps_existing(kv_store):
    assert kv_store.put_if_absent(b"k", b"first") is None
    assert kv_store.put_if_absent(b"k", b"second") == b"first"
    assert kv_store.get(b"k") == b"first"


def test_put_all_applies_in_order_with_deletes(kv_store):
    kv_store.put(b"gone", b"x")
    kv_store.put_all([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"gone", None)])
    assert list(kv_store.all()) == [(b"a", b"3"), (b"b", b"2")]


def test_put_all_with_a_bad_pair_changes_nothing(kv_store):
    kv_store.put(b"a", b"old")
    with pytest.raises(TypeError, match="key must be bytes, got str: 'b'"):
        kv_store.put_all([(b"a", b"new"), ("b", b"2")])
    assert list(kv_store.all()) == [(b"a", b"old")]


def _fill(store, keys):
    for k in keys:
        store.put(k, k.upper())


def test_range_is_inclusive_and_ordered(kv_store):
    _fill(kv_store, [b"d", b"a", b"c", b"b", b"e"])
    assert [k for k, _ in kv_store.range(b"b", b"d")] == [b"b", b"c", b"d"]
    assert [k for k, _ in kv_store.reverse_range(b"b", b"d")] == [b"d", b"c", b"b"]
    assert [k for k, _ in kv_store.range(None, b"b")] == [b"a", b"b"]
    assert [k for k, _ in kv_store.range(b"d", None)] == [b"d", b"e"]
    assert [k for k, _ in kv_store.reverse_range(None, None)] == [b"e", b"d", b"c", b"b", b"a"]
    assert list(kv_store.range(b"b", b"b")) == [(b"b", b"B")]
    assert list(kv_store.range(b"bb", b"bz")) == []


def test_range_bound_is_exact_for_keys_sharing_a_prefix(kv_store):
    _fill(kv_store, [b"a", b"a\x00", b"a\x00\x00", b"a\x01", b"ab"])
    assert [k for k, _ in kv_store.range(b"a", b"a\x00")] == [b"a", b"a\x00"]
    assert [k for k, _ in kv_store.reverse_range(b"a\x00", b"a\x01")] == [
        b"a\x01",
        b"a\x00\x00",
        b"a\x00",
    ]


def test_inverted_range_is_empty_and_warns(kv_store, caplog):
    _fill(kv_store, [b"a", b"b", b"c"])
    with caplog.at_level(logging.WARNING, logger="spark_statestore.stores"):
        assert list(kv_store.range(b"c", b"a")) == []
        assert list(kv_store.reverse_range(b"c", b"a")) == []
    assert sum("the key range is invalid" in r.getMessage() for r in caplog.records) == 2


def test_all_and_reverse_all(kv_store):
    _fill(kv_store, [b"b", b"a", b"c"])
    assert [k for k, _ in kv_store.all()] == [b"a", b"b", b"c"]
    assert [k for k, _ in kv_store.reverse_all()] == [b"c", b"b", b"a"]


def test_prefix_scan(kv_store):
    _fill(kv_store, [b"ab", b"a", b"abc", b"b", b"aa", b"a\xff", b"\xff\xff", b"\xff\xff\x01"])
    assert [k for k, _ in kv_store.prefix_scan(b"a")] == [b"a", b"aa", b"ab", b"abc", b"a\xff"]
    assert [k for k, _ in kv_store.prefix_scan(b"ab")] == [b"ab", b"abc"]
    assert [k for k, _ in kv_store.prefix_scan(b"\xff\xff")] == [b"\xff\xff", b"\xff\xff\x01"]
    assert [k for k, _ in kv_store.prefix_scan(b"")] == sorted(
        [b"ab", b"a", b"abc", b"b", b"aa", b"a\xff", b"\xff\xff", b"\xff\xff\x01"]
    )
    assert list(kv_store.prefix_scan(b"zz")) == []


def test_iterator_peek_close_and_context_manager(kv_store):
    _fill(kv_store, [b"a", b"b"])
    it = kv_store.all()
    assert it.has_next()
    assert it.peek_next_key() == b"a"
    assert it.peek_next_key() == b"a"
    assert next(it) == (b"a", b"A")
    assert it.peek_next_key() == b"b"
    assert next(it) == (b"b", b"B")
    with pytest.raises(StopIteration):
        it.peek_next_key()
    assert not it.has_next()
    with pytest.raises(StopIteration):
        next(it)
    with kv_store.all() as it2:
        assert next(it2)[0] == b"a"
    assert list(it2) == []
    it3 = kv_store.all()
    it3.close()
    assert list(it3) == []


def test_approximate_num_entries(kv_store):
    _fill(kv_store, [bytes([i]) for i in range(50)])
    kv_store.flush()
    assert 25 <= kv_store.approximate_num_entries() <= 100


def test_none_key_and_wrong_types(kv_store):
    kv_store.put(b"k", b"v")
    with pytest.raises(TypeError, match="^key cannot be None$"):
        kv_store.put(None, b"v")
    with pytest.raises(TypeError, match="^key cannot be None$"):
        kv_store.get(None)
    with pytest.raises(TypeError, match="^key cannot be None$"):
        kv_store.delete(None)
    with pytest.raises(TypeError, match="key must be bytes, got str: 'k'"):
        kv_store.put("k", b"other")
    with pytest.raises(TypeError, match="value must be bytes or None, got int: 5"):
        kv_store.put(b"k", 5)
    with pytest.raises(TypeError, match="key_from must be bytes or None, got int: 1"):
        kv_store.range(1, b"z")
    with pytest.raises(TypeError, match="prefix must be bytes"):
        kv_store.prefix_scan("a")
    assert list(kv_store.all()) == [(b"k", b"v")]


def test_use_after_close_raises_and_iterators_end(kv_factory):
    store = kv_factory()
    _fill(store, [b"a", b"b", b"c"])
    it = store.all()
    assert next(it)[0] == b"a"
    store.close()
    assert not store.is_open
    assert list(it) == []
    for call in (
        lambda: store.get(b"a"),
        lambda: store.put(b"a", b"x"),
        lambda: store.range(None, None),
        lambda: store.prefix_scan(b"a"),
        lambda: store.approximate_num_entries(),
    ):
        with pytest.raises(StoreClosedError, match="'kv' is closed"):
            call()
    store.close()  # closing twice is harmless


def test_name_and_persistence_flags(kv_factory):
    store = kv_factory("orders")
    assert store.name == "orders"
    assert store.is_open
    assert store.persistent is (kv_factory.kind == "rocksdb")


def test_iterator_sees_consistent_data_while_writing(kv_store):
    _fill(kv_store, [b"a", b"c", b"e"])
    seen = []
    for k, v in kv_store.all():
        seen.append((k, v))
        kv_store.put(k, b"changed")
        kv_store.put(b"b", b"B")
    # keys present before the iterator opened are all seen exactly once, in order
    assert [k for k, _ in seen if k in (b"a", b"c", b"e")] == [b"a", b"c", b"e"]
    assert [k for k, _ in seen] == sorted({k for k, _ in seen})


def test_in_memory_iterators_are_live(tmp_path):
    store = Stores.in_memory_key_value_store("live")
    for k in [b"a", b"c", b"e"]:
        store.put(k, b"1")
    it = store.all()
    assert next(it)[0] == b"a"
    store.put(b"d", b"new")
    store.put(b"c", None)
    store.put(b"e", b"2")
    assert list(it) == [(b"d", b"new"), (b"e", b"2")]


def test_persistent_store_keeps_committed_data_across_reopen(tmp_path):
    path = tmp_path / "db"
    store = Stores.persistent_key_value_store("kv", path)
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    store.delete(b"b")
    store.commit()
    store.put(b"c", b"uncommitted")
    store.close()
    again = Stores.persistent_key_value_store("kv", path)
    assert list(again.all()) == [(b"a", b"1")]
    again.close()


def test_persistent_store_kind_is_checked_on_reopen(tmp_path):
    path = tmp_path / "db"
    Stores.persistent_key_value_store("s", path).close()
    with pytest.raises(ValueError, match="store 's' in .* was created as"):
        Stores.persistent_window_store("s", path, 100, 10)


def test_factory_argument_errors(tmp_path):
    with pytest.raises(TypeError, match="name cannot be None"):
        Stores.in_memory_key_value_store(None)
    with pytest.raises(TypeError, match="path cannot be None"):
        Stores.persistent_key_value_store("kv", None)
    with pytest.raises(ValueError, match="'__meta__' is reserved"):
        Stores.persistent_key_value_store("__meta__", tmp_path / "x")


def test_get_all_answers_in_order_with_none_for_absent_keys(kv_store):
    _fill(kv_store, [b"a", b"c"])
    assert kv_store.get_all([b"c", b"b", b"a", b"c"]) == [b"C", None, b"A", b"C"]
    assert kv_store.get_all([]) == []
    with pytest.raises(TypeError, match="^key cannot be None$"):
        kv_store.get_all([b"a", None])


def test_get_all_sees_pending_and_committed_writes(tmp_path):
    store = Stores.persistent_key_value_store("kv", tmp_path / "kv")
    store.put_all([(b"a", b"1"), (b"b", b"2")])
    store.commit()
    store.put(b"b", b"changed")
    store.delete(b"a")
    store.put(b"c", b"new")
    assert store.get_all([b"a", b"b", b"c", b"d"]) == [None, b"changed", b"new", None]
    store.close()


def test_cached_get_all_fills_the_cache():
    from spark_statestore import ThreadCache

    cache = ThreadCache(10_000)
    inner = Stores.in_memory_key_value_store("kv")
    inner.put_all([(b"a", b"1"), (b"b", b"2")])
    cached = Stores.caching(inner, cache)
    cached.put(b"c", b"3")
    assert cached.get_all([b"a", b"c", b"x"]) == [b"1", b"3", None]
    assert cache.misses == 2  # a and x went to the store
    assert cached.get_all([b"a"]) == [b"1"] and cache.misses == 2  # a is cached now


def test_typed_columns_from_numpy_pandas_and_arrow():
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from spark_statestore import Serdes

    typed = Stores.in_memory_key_value_store("kv").typed(Serdes.string(), Serdes.int64())
    typed.put_columns(pd.Series(["x", "y"]), np.array([1, 2]))
    typed.put_columns(pa.array(["z"]), pa.array([3]))
    assert typed.get_all(pa.array(["x", "y", "z", "w"])) == [1, 2, 3, None]
    assert typed.get_all(np.array(["z"])) == [3]
    with pytest.raises(ValueError, match="keys and values must have the same length, got 2 and 1"):
        typed.put_columns(["a", "b"], [1])


def test_put_columns_writes_and_counts_what_put_all_pair_by_pair_does(kv_factory):
    """`put_columns` (checked columns straight to the keyspace, by chunks where it buffers)
    against the base class's `put_all` (one checked `put` per pair) with the same records:
    the same contents and, in a transaction, the same uncommitted bytes and record count;
    a bad item fails both with the same error, naming it, and writes nothing."""
    import random

    from spark_statestore.stores.api import KeyValueStore

    rng = random.Random(3)
    fast, general = kv_factory(), kv_factory()
    for step in range(60):
        keys = [b"k%02d" % rng.randrange(60) for _ in range(rng.randint(0, 30))]
        values = [None if rng.random() < 0.1 else bytes(rng.randint(1, 5)) for _ in keys]
        if rng.random() < 0.5:  # distinct keys, puts only: a chunk goes in at once
            keys = list(dict.fromkeys(keys))
            values = [bytes(rng.randint(1, 5)) for _ in keys]
        fast.put_columns(keys, values)
        KeyValueStore.put_all(general, list(zip(keys, values)))
        assert list(fast.all()) == list(general.all()), step
        if kv_factory.kind == "rocksdb":
            counts = [(s.keyspace.memory_bytes, s.keyspace.entries) for s in (fast, general)]
            assert counts[0] == counts[1], step
            assert fast.approximate_num_uncommitted_bytes() == general.approximate_num_uncommitted_bytes()
            if rng.random() < 0.2:
                fast.commit(), general.commit()
    errors = []
    bad_columns = ([b"new", "bad"], [b"1", b"2"])
    for put in (lambda: fast.put_columns(*bad_columns), lambda: general.put_all(list(zip(*bad_columns)))):
        with pytest.raises(TypeError) as caught:
            put()
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "pairs[1]" in errors[0]
    assert fast.get(b"new") is None and list(fast.all()) == list(general.all())
    with pytest.raises(ValueError, match="keys and values must have the same length, got 2 and 1"):
        fast.put_columns([b"a", b"b"], [b"1"])
    assert fast.get(b"a") is None


def test_typed_put_all_by_columns_matches_the_checked_path(kv_factory):
    """A typed `put_all` of a list of pairs (encoded by columns, `put_columns` below) and of
    the same pairs from a generator (encoded pair by pair, `put_all` below) give the same
    contents; a bad item fails both the same way, naming it, and writes nothing."""
    from spark_statestore import Serdes

    stores = [kv_factory().typed(Serdes.string(), Serdes.int64()) for _ in range(2)]
    pairs = [(f"k{i % 7}", i) for i in range(20)] + [("gone", None)]
    stores[0].put_all(pairs)
    stores[1].put_all(iter(pairs))
    expected = sorted((k, v) for k, v in dict(pairs).items() if v is not None)
    assert list(stores[0].all()) == list(stores[1].all()) == expected
    bad = [("new", 1), ("other", "2")]
    errors = []
    for store, given in zip(stores, (bad, iter(bad))):
        with pytest.raises(TypeError) as caught:
            store.put_all(given)
        errors.append(str(caught.value))
        assert store.get("new") is None
    assert errors[0] == errors[1] and "pairs[1]" in errors[0]
