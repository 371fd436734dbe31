"""What the caching key-value and window stores share: the named cache they write to,
flushing into the wrapped store, and the transactional pass-throughs.

Writes stay in the cache until `flush()` or an eviction; a flush writes the latest value
of each dirty key to the wrapped store and forwards one `Change` per key to `on_flush`.
Over a transactional store, `commit()` flushes first (so the commit sees every write) and
`rollback()` drops the cache too (its entries may hold rolled-back writes).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Mapping

from spark_statestore.cache.change import Change
from spark_statestore.cache.thread_cache import NamedCache, ThreadCache
from spark_statestore.errors import StateStoreError

OnFlush = Callable[[list[Change]], Any]
_anonymous = itertools.count()


class CachingLayer:
    """Mixin for a store that fronts `self._inner` with a named cache."""

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
        if on_flush is not None and not callable(on_flush):
            raise TypeError(f"on_flush must be callable or None, got {type(on_flush).__name__}")
        if not isinstance(send_old_values, bool):
            raise TypeError(f"send_old_values must be a bool, got {send_old_values!r}")
        self._inner = inner
        self._thread_cache = cache
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
        self._on_flush = on_flush
        self._send_old_values = send_old_values
        self.persistent = inner.persistent

    @property
    def wrapped(self) -> Any:
        """The store behind the cache."""
        return self._inner

    @property
    def named_cache(self) -> NamedCache:
        return self._named

    @property
    def send_old_values(self) -> bool:
        """Whether forwarded changes carry the store's value before the flush."""
        return self._send_old_values

    @send_old_values.setter
    def send_old_values(self, send: bool) -> None:
        if not isinstance(send, bool):
            raise TypeError(f"send_old_values must be a bool, got {send!r}")
        self._send_old_values = send

    @property
    def on_flush(self) -> OnFlush | None:
        """Where flushed changes are forwarded."""
        return self._on_flush

    @on_flush.setter
    def on_flush(self, on_flush: OnFlush | None) -> None:
        if on_flush is not None and not callable(on_flush):
            raise TypeError(f"on_flush must be callable or None, got {type(on_flush).__name__}")
        self._on_flush = on_flush

    def _write_to_store(self, entries: list[tuple[Any, bytes | None]]) -> list[Change]:
        """Write flushed entries to the wrapped store; return the changes to forward."""
        raise NotImplementedError

    def _forward(self, entries: list[tuple[Any, bytes | None]]) -> None:
        changes = self._write_to_store(entries)
        if changes and self._on_flush is not None:
            self._on_flush(changes)

    def flush(self) -> None:
        """Write every dirty entry to the wrapped store and forward the changes."""
        if not self._open:
            raise self._closed()  # type: ignore[attr-defined]
        self._named.flush()
        self._inner.flush()

    def _transactional(self, method: str) -> Callable[..., Any]:
        if not self._open:
            raise self._closed()  # type: ignore[attr-defined]
        bound = getattr(self._inner, method, None)
        if bound is None:
            raise TypeError(f"store {self._inner.name!r} is not transactional: it has no {method}()")
        return bound

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        """Flush the cache, then commit the wrapped store."""
        commit = self._transactional("commit")
        self._named.flush()
        commit(offsets)

    def rollback(self) -> None:
        """Drop the cache (dirty entries included), then roll the wrapped store back."""
        rollback = self._transactional("rollback")
        self._named.clear()
        rollback()
        self._after_rollback()

    def _after_rollback(self) -> None:
        """Hook for state the wrapper derives from writes."""

    def committed_offset(self, name: str) -> int | None:
        return self._transactional("committed_offset")(name)

    def approximate_num_uncommitted_bytes(self) -> int:
        """The wrapped store's uncommitted bytes plus the cache's dirty entries."""
        return self._transactional("approximate_num_uncommitted_bytes")() + self._named.dirty_bytes

    def read_only(self, isolation: Any = "READ_COMMITTED") -> Any:
        """A view of the wrapped store (writes still in the cache are not in it)."""
        return self._transactional("read_only")(isolation)

    def _close_inner(self) -> None:
        self._named.listener = None
        if self._own_namespace:
            self._thread_cache.drop(self._named.namespace)
        else:
            self._named.discard_dirty()  # unflushed writes are discarded, like uncommitted ones
        self._inner.close()
