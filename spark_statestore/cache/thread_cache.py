"""`ThreadCache`: one byte budget shared by the named caches of the stores of a worker
(KIP-63's `cache.max.bytes.buffering`, per task slot).

A `NamedCache` serves one store. Each cached key has one entry, `[value, write, key,
touch]`, in a `SortedMap` (point access, and range walks in key order): one probe finds
the value, the dirty mark and the recency mark. Recency and dirty order are logs: a read
or write appends the entry to the touch log and stores its position there as `touch`; a
write also appends it to the write log and stores its position there as `write` (0 =
clean). An entry is at its latest place in a log where its mark equals that position, so
the least recently used entry is the first such one in the touch log, and the dirty
entries in the order of their latest writes are those of the write log. A read is one
probe and an append, a write one probe and two appends: the profile (benchmarks/README.md,
record_cache.py) found a linked LRU (`OrderedDict.move_to_end`) costing 450 ns a key in a
map of 50,000 keys, its neighbours' nodes missing the CPU caches, against 80 at 5,000.
A log is compacted when it holds more than `LOG_SLACK` times the entries; eviction lets
go of the touch log's slots it passes, so an evicted entry is freed at once. A dirty entry's value may be `None`: a deletion that has not reached the store
yet.

Size of an entry: what it really costs (`entry_size`): the key and value objects as
CPython holds them plus `ENTRY_OVERHEAD` bytes for its share of the map, the entry list,
the sorted index and the logs. A full cache evicts as it takes new entries, and under
that churn CPython's hash tables hold up to twice their live entries in slots (deleted
ones wait for the next resize), so the overhead is measured there, against RSS, by
`benchmarks/memory.py`. After a put returns, `size_bytes <= max_bytes`: the put's own
named cache evicts least-recently-used entries until the budget holds, and evicting a
dirty entry first flushes every dirty entry of that named cache (KIP-63).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from spark_statestore.stores.sizes import bytes_cost, record_cost
from spark_statestore.stores.sorted_map import SortedMap
from spark_statestore.validation import check_int

ENTRY_OVERHEAD = 320
FLUSH_CHUNK = 4096  # dirty entries handed to the listener at a time
LOG_SLACK = 4  # a log is compacted past this many times the entries (counting at least 1024)
MISSING: Any = object()

FlushListener = Callable[[list[tuple[Any, "bytes | None"]]], None]


def entry_size(key: bytes, value: bytes | None) -> int:
    """What one cache entry costs (see module docstring)."""
    return record_cost(key, value, ENTRY_OVERHEAD)


def _value_cost(value: bytes | None) -> int:
    return 0 if value is None else bytes_cost(len(value))


def _latest(log: list[list], mark: int, start: int = 0) -> list[list]:
    """The entries of `log` from `start` on that are at their latest place there (field
    `mark` equals their position), in log order."""
    return [entry for position, entry in enumerate(log[start:] if start else log, start) if entry[mark] == position]


def _renumbered(live: list[list], mark: int) -> list[list]:
    """`live` as a new log: each entry's field `mark` set to its position in it."""
    for position, entry in enumerate(live):
        entry[mark] = position
    return live


class NamedCache:
    """The cache of one store inside a `ThreadCache`."""

    def __init__(self, namespace: str, owner: "ThreadCache") -> None:
        self.namespace = namespace
        self._owner = owner
        self.entries = SortedMap()  # key -> [value, write, key, touch] (see module docstring)
        self._touches: list[list] = []  # recency log; positions before `_oldest` are stale
        self._oldest = 0
        self._writes: list[list] = []  # write log (`write` -1: clean)
        self._log_limit = LOG_SLACK * 1024
        self.dirty_count = 0
        self.size_bytes = 0
        self.listener: FlushListener | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: Any) -> Any:
        """The cached value (None for a pending deletion), or `MISSING`."""
        entry = self.entries.data.get(key)
        if entry is None:
            self._owner.misses += 1
            return MISSING
        touches = self._touches
        entry[3] = len(touches)
        touches.append(entry)
        self._owner.hits += 1
        if len(touches) > self._log_limit:
            self._compact_logs()
        return entry[0]

    def get_many(self, keys: Iterable[Any]) -> list[Any]:
        """`get` of every key, in order."""
        find = self.entries.data.get
        touches = self._touches
        touch = touches.append
        out = []
        append = out.append
        hits = 0
        for key in keys:
            entry = find(key)
            if entry is None:
                append(MISSING)
            else:
                entry[3] = len(touches)
                touch(entry)
                append(entry[0])
                hits += 1
        owner = self._owner
        owner.hits += hits
        owner.misses += len(out) - hits
        if len(touches) > self._log_limit:
            self._compact_logs()
        return out

    def put(self, key: Any, value: bytes | None, dirty: bool) -> None:
        """Cache `value` (clean: as read from the store; dirty: a write to flush later)."""
        self.put_many(((key, value),), dirty)

    def put_many(self, pairs: Iterable[tuple[Any, bytes | None]], dirty: bool) -> None:
        """`put` of every `(key, value)` pair in order, evicting after each one as `put`
        does (`pairs` may be a generator that depends on what came before)."""
        entries = self.entries
        find = entries.data.get
        owner = self._owner
        touches, writes = self._touches, self._writes
        for key, value in pairs:
            entry = find(key)
            if entry is None:
                delta = entry_size(key, value)
                entry = [value, -1, key, len(touches)]
                entries.set(key, entry)
            else:
                old = entry[0]
                if old is None or value is None or len(old) != len(value):
                    delta = _value_cost(value) - _value_cost(old)
                else:
                    delta = 0
                entry[0] = value
                entry[3] = len(touches)
                owner.overwrites += 1
            touches.append(entry)
            if dirty:
                if entry[1] < 0:
                    self.dirty_count += 1
                entry[1] = len(writes)
                writes.append(entry)
            if delta:
                self.size_bytes += delta
                owner.size_bytes += delta
            if owner.size_bytes > owner.max_bytes:
                owner._evict_from(self)  # may flush (and a listener write): new logs
            elif len(touches) <= self._log_limit and len(writes) <= self._log_limit:
                continue
            self._compact_logs()
            touches, writes = self._touches, self._writes

    def _compact_logs(self) -> None:
        """Compact a log longer than `_log_limit` to its live entries; the limit is then
        `LOG_SLACK` times the entries (counting at least 1024)."""
        limit = self._log_limit
        if len(self._touches) > limit:
            self._touches = _renumbered(_latest(self._touches, 3, self._oldest), 3)
            self._oldest = 0
        if len(self._writes) > limit:
            self._writes = _renumbered(self._dirty_entries(), 1)
        self._log_limit = LOG_SLACK * max(len(self.entries), 1024)

    def _dirty_entries(self) -> list[list]:
        """The dirty entries, in the order of their latest write."""
        return _latest(self._writes, 1)

    def _remove(self, key: Any) -> None:
        entry = self.entries.pop(key, None)
        if entry is None:
            return
        size = entry_size(key, entry[0])
        self.size_bytes -= size
        self._owner.size_bytes -= size
        entry[3] = -1
        if entry[1] >= 0:
            entry[1] = -1
            self.dirty_count -= 1

    def evict(self) -> None:
        """Remove the least recently used entry, flushing this cache first if it is dirty."""
        if not self.entries:
            return
        touches = self._touches
        position = self._oldest
        entry = touches[position]
        while entry[3] != position:  # an earlier touch, or a removed entry: let it go
            touches[position] = None
            position += 1
            entry = touches[position]
        self._oldest = position
        key = entry[2]
        if entry[1] >= 0:
            self.flush()
        if key in self.entries:
            self._remove(key)
            self._owner.evicts += 1

    def flush(self) -> None:
        """Hand every dirty entry, in the order of its latest write, to the listener (in
        lists of up to `FLUSH_CHUNK` entries).

        The entries are marked clean (deletions dropped) before the listener runs, so a
        listener that writes to this cache again starts a new set of dirty entries instead
        of looping over the current one."""
        if not self.dirty_count:
            return
        records = []
        for entry in self._dirty_entries():
            entry[1] = -1
            records.append((entry[2], entry[0]))
        self._writes = []
        self.dirty_count = 0
        for key, value in records:
            if value is None:
                self._remove(key)
        self._owner.flushes += 1
        listener = self.listener
        if listener is not None:
            # in chunks: what a flush builds downstream (changes, writes) stays bounded
            for start in range(0, len(records), FLUSH_CHUNK):
                listener(records[start : start + FLUSH_CHUNK])

    @property
    def dirty_bytes(self) -> int:
        """Key and value bytes of the dirty entries (a deletion counts its key)."""
        return sum(len(entry[2]) + len(entry[0] or b"") for entry in self._dirty_entries())

    def first(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes | None] | None:
        """The first entry with `lo <= key < hi` (a deletion shows as value None)."""
        return next(self.items(lo, hi, False), None)

    def last(self, lo: bytes | None, hi: bytes) -> tuple[bytes, bytes | None] | None:
        return next(self.items(lo, hi, False, True), None)

    def items(
        self, lo: Any, hi: Any, hi_inclusive: bool = True, reverse: bool = False
    ) -> Iterator[tuple[Any, bytes | None]]:
        """Live walk in key order over [lo, hi] (deletions included as value None)."""
        for key, entry in self.entries.iter_items(lo, hi, True, hi_inclusive, reverse):
            yield key, entry[0]

    def discard_dirty(self) -> None:
        """Drop the entries that were written but not flushed; clean ones stay."""
        for entry in self._dirty_entries():
            self._remove(entry[2])
        self._writes = []

    def clear(self) -> None:
        """Drop every entry, dirty ones included."""
        self._owner.size_bytes -= self.size_bytes
        self.size_bytes = 0
        self.entries.clear()
        self._touches = []
        self._oldest = 0
        self._writes = []
        self.dirty_count = 0
        self._log_limit = LOG_SLACK * 1024


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
