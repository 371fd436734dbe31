"""What the caching key-value and window stores share: the named cache they write to,
flushing into the wrapped store, and the transactional pass-throughs.

Writes stay in the cache until `flush()` or an eviction; a flush writes the latest value
of each dirty key to the wrapped store and forwards one `Change` per key to `on_flush`.
Over a transactional store, `commit()` flushes first (so the commit sees every write) and
`rollback()` drops the cache too (its entries may hold rolled-back writes).

Where the cache cannot help, the bulk calls (`get_all`, `put_all` and what is built on
them, such as a typed store's `put_columns`) pass it by: over a transactional store, whose
write buffer already keeps one write per key until the commit, and with no listener to
forward flushed changes to, there is nothing for the cache to de-duplicate, and a read of
the store costs less than the cache's bookkeeping (`benchmarks/record_cache.py`). They go
through the cache again as soon as it holds a write of the store (single `put`s) or a
listener is set, so reads always see the latest write and forwarded changes stay
de-duplicated.

Range reads merge the cache's live walk with a read of the store, and a caller may hold
one while it writes: a flush or an eviction moves dirty entries to the store, whose side
of the merge may have passed them or read a snapshot, and a commit, rollback or dropped
cache takes entries away that hid the store's older values. So a range read re-opens
both sides past the last key it yielded whenever the cache moved (`_held`), as the
transaction's own merged scans re-open when its generation moves: it yields keys in
order, each once, each with a value the key held since the read opened, and every key
present at the open and never absent since. What changes the store other than through
this wrapper (a spill, another store's commit of the shared transaction) the store's
own reads follow.
"""

from __future__ import annotations

import itertools
from itertools import dropwhile
from typing import Any, Callable, Iterator, Mapping

from spark_statestore.cache.change import Change
from spark_statestore.cache.thread_cache import MISSING, NamedCache, ThreadCache
from spark_statestore.errors import StateStoreError
from spark_statestore.txn.budget import uncommitted_cost
from spark_statestore.txn.stores import TransactionalStore

OnFlush = Callable[[list[Change]], Any]
Entry = tuple[Any, "bytes | None"]
_anonymous = itertools.count()


def past(key: Any, entries: Iterator[Entry]) -> Iterator[Entry]:
    """`entries` of a store read that starts at `key` inclusive, without `key` (an
    inclusive bound is what the stores' range reads take)."""
    return dropwhile(lambda entry: entry[0] == key, entries)


class CachingLayer:
    """Mixin for a store that fronts `self._inner` with a named cache: what Kafka Streams'
    caching wrappers offer (`flush_cache`, `clear_cache`, `set_flush_listener`) and the
    transactional pass-throughs."""

    _inner: Any
    _named: NamedCache
    _open: bool

    def _attach(
        self,
        inner: Any,
        cache: ThreadCache,
        on_flush: OnFlush | None,
        send_old_values: bool,
        namespace: str | None,
    ) -> None:
        if not isinstance(cache, ThreadCache):
            raise TypeError(f"cache must be a ThreadCache, got {type(cache).__name__}: {cache!r}")
        self._inner = inner
        self._thread_cache = cache
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise TypeError(f"namespace must be a non-empty str or None, got {type(namespace).__name__}: {namespace!r}")
        self._own_namespace = namespace is None
        if namespace is None:
            namespace = f"{inner.name}#{next(_anonymous)}"
        named = cache.named_cache(namespace)
        if named.dirty:
            raise StateStoreError(
                f"named cache {namespace!r} holds unflushed writes of another store; flush or drop it first"
            )
        named.listener = self._forward
        self._named = named
        self._inner_transactional = isinstance(inner, TransactionalStore)
        self.set_flush_listener(on_flush, send_old_values)
        self.persistent = inner.persistent

    @property
    def named_cache(self) -> NamedCache:
        """This store's cache (for inspection)."""
        return self._named

    def set_flush_listener(self, on_flush: OnFlush | None, send_old_values: bool = False) -> None:
        """Where flushed changes are forwarded (`Change` lists), and whether they carry the
        store's value before the flush."""
        if on_flush is not None and not callable(on_flush):
            raise TypeError(f"on_flush must be callable or None, got {type(on_flush).__name__}")
        if not isinstance(send_old_values, bool):
            raise TypeError(f"send_old_values must be a bool, got {send_old_values!r}")
        self._on_flush = on_flush
        self._send_old_values = send_old_values

    @property
    def send_old_values(self) -> bool:
        return self._send_old_values

    def flush_cache(self) -> None:
        """Write every dirty entry to the wrapped store and forward the changes (the store
        itself is not flushed)."""
        if not self._open:
            raise self._closed()  # type: ignore[attr-defined]
        self._named.flush()

    def clear_cache(self) -> None:
        """Drop every cached entry, dirty ones included (writes of a failed attempt)."""
        self._named.clear()

    def _passes_by(self) -> bool:
        """Whether bulk calls go straight to the wrapped store (see module docstring)."""
        return self._on_flush is None and self._inner_transactional and not self._named.dirty

    def _read_through(self, cache_keys: list[bytes], fetch: Callable[[list[int]], list]) -> list[bytes | None]:
        """Values of many cache keys: cached ones from the cache, the rest by one `fetch`
        of their positions from the store (filling the cache with what it finds)."""
        out = self._named.get_many(cache_keys)
        missing = [i for i, value in enumerate(out) if value is MISSING]
        if missing:
            for i, value in zip(missing, fetch(missing), strict=True):
                out[i] = value
            self._named.put_many(((cache_keys[i], out[i]) for i in missing if out[i] is not None), False)
        return out

    def _held(self, open_: Callable[[Any], Iterator[Entry]]) -> Iterator[tuple[Any, bytes]]:
        """The live entries of a range read that goes on past the cache's moves (module
        docstring): `open_(None)` merges the cache and the store over the range (deletions
        included, as value None), now; `open_(key)` over the rest of it past `key`."""
        return self._go_on(self._named.generation, open_(None), open_)

    def _go_on(
        self, generation: int, merged: Iterator[Entry], open_: Callable[[Any], Iterator[Entry]]
    ) -> Iterator[tuple[Any, bytes]]:
        """`_held` from its first merge (opened at `generation`) on. A store closed by the
        time of a re-open ends the read, as a close ends every read."""
        named = self._named
        if named.generation != generation:  # moved before the first record was asked for
            generation = named.generation
            merged = open_(None)
        while True:
            for entry in merged:
                if entry[1] is not None:
                    yield entry  # as it is: no tuple built per record
                    if named.generation != generation:
                        break
            else:
                return
            if not self._inner.is_open:
                return
            generation = named.generation
            merged = open_(entry[0])  # past the last key yielded

    def _write_to_store(self, entries: list[tuple[Any, bytes | None]]) -> list[Change]:
        """Write flushed entries to the wrapped store; return the changes to forward."""
        raise NotImplementedError

    def _forward(self, entries: list[tuple[Any, bytes | None]]) -> None:
        changes = self._write_to_store(entries)
        if changes and self._on_flush is not None:
            self._on_flush(changes)

    def flush(self) -> None:
        """Write every dirty entry to the wrapped store and forward the changes."""
        self.flush_cache()
        self._inner.flush()

    def _transactional(self) -> TransactionalStore:
        if not self._open:
            raise self._closed()  # type: ignore[attr-defined]
        inner = self._inner
        if not isinstance(inner, TransactionalStore):
            raise TypeError(f"store {inner.name!r} is not transactional: it has no commit, rollback or views")
        return inner

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        """Flush the cache, then commit the wrapped store."""
        inner = self._transactional()
        self._named.flush()
        inner.commit(offsets)

    def rollback(self) -> None:
        """Drop the cache (dirty entries included), then roll the wrapped store back."""
        inner = self._transactional()
        self._named.clear()
        inner.rollback()
        self._after_rollback()

    def _after_rollback(self) -> None:
        """Hook for state the wrapper derives from writes."""

    def committed_offset(self, name: str) -> int | None:
        return self._transactional().committed_offset(name)

    def approximate_num_uncommitted_bytes(self) -> int:
        """The wrapped store's uncommitted bytes plus those of the cache's dirty entries
        (the same quantity: `txn.budget.uncommitted_cost`)."""
        named = self._named
        return self._transactional().approximate_num_uncommitted_bytes() + uncommitted_cost(
            named.dirty_bytes, len(named.dirty)
        )

    def read_only(self, isolation: Any = "READ_COMMITTED") -> Any:
        """A view of the wrapped store (writes still in the cache are not in it)."""
        return self._transactional().read_only(isolation)

    def _close_inner(self) -> None:
        self._named.listener = None
        if self._own_namespace:
            self._thread_cache.drop(self._named.namespace)
        else:
            self._named.discard_dirty()  # unflushed writes are discarded, like uncommitted ones
        self._inner.close()

