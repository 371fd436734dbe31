"""`ThreadCache`: one byte budget shared by the named caches of the stores of a worker
(KIP-63's `cache.max.bytes.buffering`, per task slot).

A `NamedCache` serves one store. Its entries live in a `SortedMap` over an `OrderedDict`,
which gives point access, range walks in key order, and least-recently-used order in one
structure; its dirty keys are a dict ordered by each key's latest write. A dirty entry's
value may be `None`: a deletion that has not reached the store yet.

Size of an entry: what it really costs (`entry_size`): the key and value objects as
CPython holds them plus `ENTRY_OVERHEAD` bytes for its share of the ordered map, the LRU
links, the sorted index and the dirty set. A full cache evicts as it takes new entries,
and under that churn CPython's hash tables hold up to twice their live entries in slots
(deleted ones wait for the next resize), so the overhead is measured there, against RSS,
by `benchmarks/memory.py`. After a put returns, `size_bytes <= max_bytes`: the put's
own named cache evicts least-recently-used entries until the budget holds, and evicting a
dirty entry first flushes every dirty entry of that named cache (KIP-63).

`NamedCache.generation` moves whenever entries move between the cache and its store
behind the back of a range read that merges the two (a flush, a drop of entries, a write
that passes the cache by): such a read re-opens past the last key it yielded
(`CachingLayer._held`). Evicting a clean entry does not move it: the store's side of the
merge holds the same value.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from spark_statestore.stores.sizes import bytes_cost, record_cost
from spark_statestore.stores.sorted_map import SortedMap
from spark_statestore.validation import check_int

ENTRY_OVERHEAD = 320
FLUSH_CHUNK = 4096  # dirty entries handed to the listener at a time
MISSING: Any = object()

FlushListener = Callable[[list[tuple[Any, "bytes | None"]]], None]


def entry_size(key: bytes, value: bytes | None) -> int:
    """What one cache entry costs (see module docstring)."""
    return record_cost(key, value, ENTRY_OVERHEAD)


def _value_cost(value: bytes | None) -> int:
    return 0 if value is None else bytes_cost(len(value))


class NamedCache:
    """The cache of one store inside a `ThreadCache`."""

    def __init__(self, namespace: str, owner: "ThreadCache") -> None:
        self.namespace = namespace
        self._owner = owner
        self.entries = SortedMap(ordered=True)
        self.dirty: dict[Any, None] = {}
        self.size_bytes = 0
        self.listener: FlushListener | None = None
        self.generation = 0  # see module docstring

    def moved(self) -> None:
        """The store was written past this cache (or entries moved between the two): open
        merged reads re-open."""
        self.generation += 1

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: Any) -> Any:
        """The cached value (None for a pending deletion), or `MISSING`."""
        entries = self.entries
        value = entries.get(key, MISSING)
        owner = self._owner
        if value is MISSING:
            owner.misses += 1
            return MISSING
        entries.touch(key)
        owner.hits += 1
        return value

    def get_many(self, keys: list[Any]) -> list[Any]:
        """`get` of every key, in order, in one loop."""
        data = self.entries.data
        find = data.get
        touch = data.move_to_end
        out = [find(key, MISSING) for key in keys]
        hits = 0
        for key, value in zip(keys, out):
            if value is not MISSING:
                touch(key)
                hits += 1
        owner = self._owner
        owner.hits += hits
        owner.misses += len(out) - hits
        return out

    def put(self, key: Any, value: bytes | None, dirty: bool) -> None:
        """Cache `value` (clean: as read from the store; dirty: a write to flush later)."""
        self.put_many(((key, value),), dirty)

    def put_many(self, pairs: Iterable[tuple[Any, bytes | None]], dirty: bool) -> None:
        """`put` of every `(key, value)` pair in order, evicting after each one as `put`
        does, in one loop (`pairs` may be a generator that depends on what came before)."""
        entries = self.entries
        data = entries.data
        find = data.get
        touch = data.move_to_end
        owner = self._owner
        dirty_keys = self.dirty
        for key, value in pairs:
            old = find(key, MISSING)
            if old is MISSING:
                delta = entry_size(key, value)
                entries.set(key, value)  # a new key: goes to the end, the most recently used
            else:
                if old is None or value is None or len(old) != len(value):
                    delta = _value_cost(value) - _value_cost(old)
                else:
                    delta = 0
                data[key] = value  # a present key: no change to the index or the version
                touch(key)
                owner.overwrites += 1
            if dirty:
                dirty_keys.pop(key, None)  # re-insert: dirty keys are ordered by latest write
                dirty_keys[key] = None
            if delta:
                self.size_bytes += delta
                owner.size_bytes += delta
            if owner.size_bytes > owner.max_bytes:
                owner._evict_from(self)
                dirty_keys = self.dirty  # a flush starts a new set

    def remove_many(self, keys: Iterable[Any]) -> None:
        """Drop the entries of `keys` (those present), dirty or clean."""
        self.generation += 1
        for key in keys:
            self._remove(key)

    def _remove(self, key: Any) -> None:
        value = self.entries.pop(key, MISSING)
        if value is MISSING:
            return
        size = entry_size(key, value)
        self.size_bytes -= size
        self._owner.size_bytes -= size
        self.dirty.pop(key, None)

    def evict(self) -> None:
        """Remove the least recently used entry, flushing this cache first if it is dirty."""
        entries = self.entries
        if not entries:
            return
        key = entries.oldest_key()
        if key in self.dirty:
            self.flush()
        if key in entries:
            self._remove(key)
            self._owner.evicts += 1

    def flush(self) -> None:
        """Hand every dirty entry, in the order of its latest write, to the listener (in
        lists of up to `FLUSH_CHUNK` entries).

        The entries are marked clean (deletions dropped) before the listener runs, so a
        listener that writes to this cache again starts a new set of dirty entries instead
        of looping over the current one."""
        if not self.dirty:
            return
        get = self.entries.get
        keys = list(self.dirty)
        values = [get(key) for key in keys]
        self.dirty = {}
        self.generation += 1
        for key, value in zip(keys, values):
            if value is None:
                self._remove(key)
        self._owner.flushes += 1
        listener = self.listener
        if listener is not None:
            # in chunks: what a flush builds downstream (changes, writes) stays bounded
            for start in range(0, len(keys), FLUSH_CHUNK):
                listener(list(zip(keys[start : start + FLUSH_CHUNK], values[start : start + FLUSH_CHUNK])))

    @property
    def dirty_bytes(self) -> int:
        """Key and value bytes of the dirty entries (a deletion counts its key)."""
        get = self.entries.get
        return sum(len(k) + len(get(k) or b"") for k in self.dirty)

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes | None] | None:
        """The first entry with `lo <= key < hi` (a deletion shows as value None)."""
        return next(self.entries.iter_items(lo, hi, True, False), None)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes | None] | None:
        return next(self.entries.iter_items(lo, hi, True, False, True), None)

    def items(
        self, lo: Any, hi: Any, hi_inclusive: bool = True, reverse: bool = False
    ) -> Iterator[tuple[Any, bytes | None]]:
        """Live walk in key order over [lo, hi] (deletions included as value None)."""
        return self.entries.iter_items(lo, hi, True, hi_inclusive, reverse)

    def discard_dirty(self) -> None:
        """Drop the entries that were written but not flushed; clean ones stay."""
        self.generation += 1
        for key in list(self.dirty):
            self._remove(key)

    def clear(self) -> None:
        """Drop every entry, dirty ones included."""
        self._owner.size_bytes -= self.size_bytes
        self.size_bytes = 0
        self.entries.clear()
        self.dirty = {}
        self.generation += 1


class ThreadCache:
    """A byte budget shared by named caches. Counters: hits, misses, overwrites, evicts,
    flushes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = check_int(max_bytes, "max_bytes", 0)
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        self.overwrites = 0
        self.evicts = 0
        self.flushes = 0
        self._caches: dict[str, NamedCache] = {}

    def named_cache(self, namespace: str) -> NamedCache:
        """The named cache `namespace` (created if new; an existing one keeps its entries)."""
        cache = self._caches.get(namespace)
        if cache is None:
            cache = self._caches[namespace] = NamedCache(namespace, self)
        return cache

    def rename(self, namespace: str, new_namespace: str) -> None:
        """Give the named cache `namespace` (with its entries) the name `new_namespace`,
        replacing any cache of that name."""
        cache = self._caches.pop(namespace, None)
        if cache is None or namespace == new_namespace:
            if cache is not None:
                self._caches[namespace] = cache
            return
        self.drop(new_namespace)
        cache.namespace = new_namespace
        self._caches[new_namespace] = cache

    def drop(self, namespace: str) -> None:
        """Forget a named cache and its entries (dirty ones are lost: flush first)."""
        cache = self._caches.pop(namespace, None)
        if cache is not None:
            cache.clear()

    @property
    def namespaces(self) -> list[str]:
        return list(self._caches)

    def _evict_from(self, cache: NamedCache) -> None:
        while self.size_bytes > self.max_bytes and cache.entries:
            cache.evict()

    def resize(self, max_bytes: int) -> None:
        """Change the budget; shrinking evicts least-recently-used entries, round robin."""
        self.max_bytes = check_int(max_bytes, "max_bytes", 0)
        while self.size_bytes > self.max_bytes:
            before = self.size_bytes
            for cache in list(self._caches.values()):
                if self.size_bytes <= self.max_bytes:
                    break
                cache.evict()
            if self.size_bytes == before:  # nothing left to evict
                break

    def stats(self) -> dict[str, int]:
        return {
            "size_bytes": self.size_bytes,
            "max_bytes": self.max_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "overwrites": self.overwrites,
            "evicts": self.evicts,
            "flushes": self.flushes,
        }

    def __repr__(self) -> str:
        return f"ThreadCache({self.stats()})"
