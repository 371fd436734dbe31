"""The caching session store's own read logic: where a read re-opens after the cache moved
under it, and the liveness filter over sessions the cache still holds."""

from __future__ import annotations

import pytest
from session_support import open_session_store

from spark_statestore.cache.caching_session import CachingSessionStore
from spark_statestore.cache.thread_cache import ThreadCache


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("backward", [False, True])
def test_a_read_reopened_after_a_flush_yields_no_session_twice(tmp_path, kind, backward):
    """A flush under an open read moves the cache: the read re-opens past the last session
    it yielded, which is then both still cached and in the store; it must come once."""
    store = CachingSessionStore(open_session_store(kind, str(tmp_path / "db"), 1000), ThreadCache(1 << 20))
    for key in (b"a", b"b", b"c"):
        store.put(key, 1, 2, key)
    seen = []
    for window, value in store.backward_all() if backward else store.all():
        seen.append((tuple(window), value))
        store.flush_cache()  # every cached session now also in the store, and kept cached
    want = [((key, 1, 2), key) for key in (b"a", b"b", b"c")]
    assert seen == (want[::-1] if backward else want)
    store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_a_session_the_stream_time_expires_during_a_read_is_not_yielded(tmp_path, kind):
    """Liveness is judged as each session is yielded: the read's bounds were fixed at its
    open, so a session still cached when a later put moves the stream time past it must
    be left out by the read itself."""
    store = CachingSessionStore(open_session_store(kind, str(tmp_path / "db"), 100), ThreadCache(1 << 20))
    store.put(b"a", 1, 2, b"a")
    store.put(b"b", 5, 10, b"b")  # both cached only, not flushed
    seen = []
    for window, _ in store.all():
        seen.append(tuple(window))
        if window.key == b"a":
            store.put(b"a", 500, 500, b"late")  # stream time 500: (b, 5, 10) expires
    assert (b"a", 1, 2) in seen and (b"b", 5, 10) not in seen
    assert list(store.fetch(b"b")) == []
    store.close()
