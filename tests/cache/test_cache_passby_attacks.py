"""Attacks on the record cache's pass-by (found by an adversarial probe): bulk and single
calls must agree after `clear_cache()` (which drops dirty entries but not the stream time
they advanced the cache to), and bad keys get one clear error whichever way a call goes."""

from __future__ import annotations

from spark_statestore import Stores, ThreadCache


def _cleared(tmp_path):
    inner = Stores.persistent_window_store("w", tmp_path / "db", 100, 10)
    store = Stores.caching(inner, ThreadCache(1 << 20))
    store.put(b"a", b"1", 0)
    store.flush()
    store.put(b"b", b"1", 1000)  # advances the cache's stream time; dirty
    store.clear_cache()  # drops the dirty write, not the cache's stream time
    assert store.observed_stream_time == 1000
    return store


def test_window_get_all_after_clear_cache_agrees_with_get(tmp_path):
    store = _cleared(tmp_path)
    assert store.get(b"a", 0) is None  # expired by the cache's stream time
    assert store.get_all([b"a"], [0]) == [store.get(b"a", 0)]
    store.close()


def test_window_put_all_after_clear_cache_drops_a_late_record_like_put(tmp_path):
    store = _cleared(tmp_path)
    store.put_all([(b"c", b"1", 10)])  # late against 1000 - 100
    assert store.get_all([b"c"], [10]) == [None]
    store.close()


def test_get_all_names_keys_whichever_way_the_cache_goes(tmp_path):
    """Bad `keys` get the same clear error (naming `keys`) whether the bulk read passes
    the cache by or goes through it (a dirty entry makes it go through)."""
    inner = Stores.persistent_key_value_store("kv", tmp_path / "db")
    store = Stores.caching(inner, ThreadCache(1 << 20))
    for dirty in (False, True):
        if dirty:
            store.put(b"z", b"9")
        for bad in (None, b"ab"):
            try:
                store.get_all(bad)
            except TypeError as e:
                assert "keys must be an iterable" in str(e), (dirty, bad, e)
            else:
                raise AssertionError(f"get_all({bad!r}) was accepted (dirty={dirty})")
    store.close()
