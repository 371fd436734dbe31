"""A partition's record-cache namespaces are `<root>/<store>@<version>`, and opening
a store drops its own namespaces at other versions (filled by another attempt or at
another version). Store names may contain '@': opening store "a" must not drop the cache that store "a@b"
(opened just before) is using, or its entries would live in a named cache the ThreadCache
no longer knows (never renamed, never evicted by a resize, its bytes never given back)."""

from __future__ import annotations

from spark_statestore import ThreadCache
from spark_statestore.partition import PartitionState, StoreSpec, WorkerResources


def test_a_store_whose_name_extends_another_keeps_its_cache(dirs):
    checkpoint, local = dirs
    cache = ThreadCache(1 << 20)
    specs = [StoreSpec.key_value("a@b"), StoreSpec.key_value("a")]
    state = PartitionState(checkpoint, 0, specs, WorkerResources(local, cache=cache))
    state.open(0)
    store = state.store("a@b")
    store.put(b"k", b"v")
    state.prepare()
    state.close()
    # every cached byte belongs to a named cache the ThreadCache knows (kept for version 0)
    assert cache.size_bytes == sum(cache.named_cache(ns).size_bytes for ns in cache.namespaces)
    assert [ns.rsplit("/", 1)[1] for ns in cache.namespaces if "a@b@" in ns], cache.namespaces
